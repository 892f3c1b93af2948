"""`workers = N`: worker 0 starts a worker that dies again, and workers stop when worker 0 is gone."""

from __future__ import annotations

import os
import re
import signal
import urllib.request
from pathlib import Path

from confluent_kafka import Producer

from tests.support.kafka_helpers import create_topic, unique_topic, wait_until


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return response.status
    except OSError:
        return 0


def produce_through(bootstrap: str, topic: str, count: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "workers-test", "linger.ms": 0})
    for index in range(count):
        producer.produce(topic, str(index).encode())
    return count - producer.flush(20)


def test_a_killed_worker_is_started_again_and_workers_stop_when_worker_0_is_gone(proxy_factory, kafka) -> None:
    proxy = proxy_factory(kafka.bootstrap, proxy_toml="workers = 3\n")
    workers = children(proxy.process.pid)
    assert len(workers) == 2
    wait_until(lambda: all(healthz(proxy.metrics_port + w) == 200 for w in (1, 2)), 20, "workers 1 and 2 serving")

    os.kill(workers[0], signal.SIGKILL)
    wait_until(lambda: "started again as pid" in proxy.log_text(), 20, "worker 1 started again")
    log = proxy.log_text()
    assert re.search(r"worker 1 \(pid \d+\) was killed by signal SIGKILL after \d+ s", log), log[-2000:]
    wait_until(lambda: healthz(proxy.metrics_port + 1) == 200, 30, "the new worker 1 serving its metrics")
    restarted = int(re.findall(r"worker 1 started again as pid (\d+)", proxy.log_text())[-1])
    assert restarted in children(proxy.process.pid) and restarted != workers[0]
    topic = unique_topic("workers")
    create_topic(kafka.bootstrap, topic, partitions=1)
    assert produce_through(proxy.bootstrap, topic, 200) == 200  # every worker's listener still serves

    survivors = children(proxy.process.pid)
    proxy.process.kill()  # worker 0 dies without a chance to stop the others
    proxy.process.wait()
    wait_until(lambda: not any(alive(pid) for pid in survivors), 20, f"workers {survivors} stopping as orphans")


def test_workers_serve_their_metrics_on_the_ports_set_explicitly(proxy_factory, kafka) -> None:
    # Worker 1 serves on metrics_port + 2 (in the fixture's block), not on metrics.port + 1.
    proxy = proxy_factory(
        kafka.bootstrap, proxy_toml="workers = 2\n", metrics_toml=lambda port: f"worker_ports = [{port}, {port + 2}]\n"
    )
    # Each worker starts its metrics server on its own: wait for both, not for worker 1 alone.
    wait_until(lambda: healthz(proxy.metrics_port + 2) == 200, 20, "worker 1 serving on its explicit port")
    wait_until(lambda: healthz(proxy.metrics_port) == 200, 20, "worker 0 serving on its explicit port")
    assert healthz(proxy.metrics_port + 1) == 0, "something serves on metrics.port + 1"
