"""The soak and chaos runs of issue 12 in their quick modes (`make soak` / `make chaos` run them long).

Both scripts start their own brokers and proxy on loopback (ports 21000 + QUOTAGATE_TEST_PORT_OFFSET
+ their layout: 21092-21809 by default), run at the same time here, and stop everything they
started. About a minute and a half together on a quiet 2-core machine (4 minutes at a load average
of 30), hence `slow`; skip with -m "not slow".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kafka_fixtures import PORT_OFFSET

REPO_ROOT = Path(__file__).resolve().parents[2]
PORT_BASE = 21000 + PORT_OFFSET
# The soak's own criterion is ±10 %; one minute of a machine shared with other suites gets more room
# here: this test pins the machinery and the figures that must not move (errors, loss, memory).
# Quotas of 64 KiB/s with a 2-s burst: spent within seconds even by producers slowed to ~95 KB/s
# (seen with the load average at 30); at 256 KiB/s and 11 s, alice was never throttled in a minute.
QUICK_ACCURACY_TOLERANCE = 0.2
# carol's request time is held at or under her quota, but how much a busy poller asks for depends on
# the CPU it gets: with the load average at 39 her client asked for 0.66x of it in a quick run (10-s
# windows 0.36-1.01; the same minute held alice at 1.05x and bob at 1.00x). Byte-rate tenants push
# far above their quotas, so for them the lower bound holds too.
BYTE_RATE_TENANTS = ("alice", "bob")
# 60 s sampled every 5 s, a tenant's rate counted from its first throttle after 8 s: about 50 s of
# steady state, 25 times the 2-s burst, so a bucket still full when the count starts adds at most
# 2/50 = 4 % to the measured rate, inside the 20 % above. A consumer's bytes come in whole fetch
# responses, charged when each is back: while bob's backlog was written in librdkafka's 1 MB batches
# (16 s of quota in one response) he was measured at 1.21x and 0.79x; in 16 KiB batches, 1.003x (5-s
# windows 0.80-1.20). (The long soak's 600 s keep 10 and 20 s.)
QUICK_SOAK = ["--seconds", "60", "--sample-seconds", "5", "--warmup-seconds", "8"]
# carol's request_percentage: 25 % here, not the long soak's 10 %. A request-time throttle is capped at
# one quota window (1 s, KIP-124), so a client whose fetches each take c seconds of broker time cannot
# be held under c / (1 + c) of a second per second: at 10 % that is over the quota once a fetch takes
# 111 ms, and over the 1.2x bound at 136 ms, which fetches on a machine at a load average of 5-21 were
# seen to take (the quick soak's known flake). At 25 % the bound needs 430-ms fetches.
QUICK_REQUEST_PERCENTAGE = "25"
# 6-s phases: a killed broker stays down past broker.session.timeout.ms (4 s in kafka_rig), so the
# controller fences it and its partitions' leadership moves while the producer writes, as at 20 s.
QUICK_CHAOS_PHASE_SECONDS = "6"

pytestmark = [pytest.mark.slow, pytest.mark.java, pytest.mark.long_only]


@pytest.mark.timeout(1200)
def test_quick_soak_holds_every_quota_and_chaos_loses_no_acknowledged_record(tmp_path: Path) -> None:
    soak_json, chaos_json = tmp_path / "soak.json", tmp_path / "chaos.json"
    runs = {
        "soak": subprocess.Popen(
            [sys.executable, "-m", "bench.soak", *QUICK_SOAK, "--port-base", str(PORT_BASE),
             "--byte-rate", "65536", "--window-num", "2", "--request-percentage", QUICK_REQUEST_PERCENTAGE,
             "--out", str(soak_json)],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ),
        "chaos": subprocess.Popen(
            [sys.executable, "-m", "bench.chaos", "--phase-seconds", QUICK_CHAOS_PHASE_SECONDS,
             "--port-base", str(PORT_BASE), "--out", str(chaos_json)],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ),
    }  # fmt: skip
    outputs = {name: run.communicate(timeout=1100)[0] for name, run in runs.items()}
    for name, output in outputs.items():
        print(f"--- {name}\n{output}")

    assert soak_json.exists(), f"the soak wrote no results:\n{outputs['soak'][-3000:]}"
    soak = json.loads(soak_json.read_text())
    failed = [name for name, ok in soak["checks"].items() if not ok and name != "accuracy_within_10pct"]
    assert not failed, f"soak criteria failed: {failed}\n{outputs['soak'][-3000:]}"
    for user, figures in soak["accuracy"].items():
        assert figures["ratio"] is not None, f"{user} was never throttled in the quick soak"
        assert figures["ratio"] <= 1 + QUICK_ACCURACY_TOLERANCE, f"{user} got more than the quota: {figures}"
        if user in BYTE_RATE_TENANTS:
            assert figures["ratio"] >= 1 - QUICK_ACCURACY_TOLERANCE, f"{user} was held below the quota: {figures}"

    assert chaos_json.exists(), f"the chaos run wrote no results:\n{outputs['chaos'][-3000:]}"
    chaos = json.loads(chaos_json.read_text())
    assert chaos["comparison"]["lost_acknowledged"] == 0, chaos["comparison"]
    assert chaos["passed"], chaos["checks"]
    assert runs["chaos"].returncode == 0
