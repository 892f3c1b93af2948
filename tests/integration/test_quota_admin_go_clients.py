"""Go clients' quota admin calls through the proxy answered as the broker answers them (issue 37
item 5), built by `make go-quota-clients`:

- franz-go's kadm (ValidateAlterClientQuotas, AlterClientQuotas, DescribeClientQuotas, driven by
  tests/go/kadm_quotas) against the test Kafka and against a proxy in front of it that answers from
  its own quotas; what kadm returns must be the same, call by call: entities as the slices it
  returns, errors and their messages, values in order. kadm ships no client-quota tests of its own
  (v1.20.0's tests need no broker), hence the program.
- IBM/sarama's own functional TestFuncAdminQuotas, direct and through the proxy, in a network
  namespace of its own (tests/go/sarama_quotas.py says why and how): about a minute, so run by
  `make test-sarama-quotas`, not by make test.

Without what they need the tests fail, naming the make target, rather than skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / ".cache" / "go-quota-suites"
KADM_QUOTAS = SUITES / "kadm_quotas"
SARAMA = ROOT / "tests" / "go" / "sarama_quotas.py"


def built(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is missing: run `make go-quota-clients`.", pytrace=False)
    return path


def kadm_calls(bootstrap: str, run: str) -> list[dict]:
    out = subprocess.run(
        [str(built(KADM_QUOTAS)), "-bootstrap", bootstrap, "-run", run],
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


@pytest.mark.sarama_only  # a minute: make test-sarama-quotas
def test_saramas_own_functional_quota_test_passes_through_the_proxy_as_it_passes_direct(tmp_path: Path) -> None:
    for binary in ("sarama_functional.test", "bin/server"):
        built(SUITES / binary)
    out = tmp_path / "sarama.json"
    done = subprocess.run(
        ["unshare", "--net", "--", sys.executable, str(SARAMA), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "SARAMA_WORKDIR": str(tmp_path / "work")},
    )  # fmt: skip
    assert out.exists(), f"the namespace run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    runs = json.loads(out.read_text())
    for path, run in runs.items():
        print(f"sarama TestFuncAdminQuotas {path}: {'PASS' if run['passed'] else 'FAIL'} in {run['seconds']} s")
    assert runs["direct"]["passed"], runs["direct"]["output"]
    assert runs["proxied"]["passed"], runs["proxied"]["output"]
