"""/readyz with the only broker frozen (SIGSTOP): a cluster of its own, started and frozen by this
test only (never the session's shared one), thawed (SIGCONT) before it ends."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request

from kafka_rig import fresh_cluster
from tests.support.kafka_fixtures import PORT_OFFSET

FROZEN_PORT = 29792 + PORT_OFFSET  # clear of the session clusters (29092-29494) and tls1 (29592-29595)
FROZEN_CONTROLLER_PORT = 29892 + PORT_OFFSET


def readyz(metrics_port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def seconds_until(metrics_port: int, status: int, limit: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if readyz(metrics_port)[0] == status:
            return time.monotonic() - started
        time.sleep(0.2)
    return None


def test_readyz_turns_503_within_seconds_of_the_only_broker_freezing(proxy_factory) -> None:
    cluster = fresh_cluster("frozen1", 1, FROZEN_PORT, controller_base_port=FROZEN_CONTROLLER_PORT)
    node = cluster.nodes[0]
    try:
        proxy = proxy_factory(cluster.bootstrap)
        assert seconds_until(proxy.metrics_port, 200, 30) is not None, readyz(proxy.metrics_port)
        assert node.pid is not None
        os.kill(node.pid, signal.SIGSTOP)
        try:
            # Probe every 2 s with a 2 s timeout: about 4 s. (The metadata refresh alone, every 5 s
            # here with a 10 s timeout, took up to 15 s; at its 30 s default, up to 40 s.)
            took = seconds_until(proxy.metrics_port, 503, 10)
            assert took is not None, f"/readyz still 200 10 s after the broker froze: {readyz(proxy.metrics_port)}"
            print(f"/readyz 503 after {took:.1f} s")
        finally:
            os.kill(node.pid, signal.SIGCONT)
        assert seconds_until(proxy.metrics_port, 200, 30) is not None, readyz(proxy.metrics_port)
    finally:
        cluster.stop()
