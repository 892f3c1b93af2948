"""A Go client's quota admin calls through the proxy answered as the broker answers them (issue 37
item 5): franz-go's kadm (ValidateAlterClientQuotas, AlterClientQuotas, DescribeClientQuotas, driven
by tests/go/kadm_quotas, built by `make go-quota-clients`) run against the test Kafka and against a
proxy in front of it that answers from its own quotas; what kadm returns must be the same, call by
call: entities as the slices it returns, errors and their messages, values in order. kadm ships no
client-quota tests of its own (v1.20.0's tests need no broker), hence the program.

Without the program the test fails, naming the make target, rather than skip."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KADM_QUOTAS = ROOT / ".cache" / "go-quota-suites" / "kadm_quotas"


def kadm_calls(bootstrap: str, run: str) -> list[dict]:
    if not KADM_QUOTAS.exists():
        pytest.fail(f"{KADM_QUOTAS.relative_to(ROOT)} is missing: run `make go-quota-clients`.", pytrace=False)
    out = subprocess.run(
        [str(KADM_QUOTAS), "-bootstrap", bootstrap, "-run", run],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    return [json.loads(line) for line in out.splitlines()]


def test_kadm_client_quota_calls_return_through_the_proxy_what_they_return_direct(proxy_factory, kafka) -> None:
    proxy = proxy_factory(kafka.bootstrap, '[admin]\nalter_principals = ["User:ANONYMOUS"]\n')
    run = uuid.uuid4().hex[:8]
    direct = kadm_calls(kafka.bootstrap, run)
    through = kadm_calls(proxy.bootstrap, run)
    for broker_call, proxy_call in zip(direct, through, strict=True):
        print(f"{broker_call['call']}:\n  direct  {broker_call}\n  proxied {proxy_call}")
    assert len(direct) == 21
    assert [call for call in direct if call.get("error") and "dial" in call["error"]] == []
    assert through == direct
