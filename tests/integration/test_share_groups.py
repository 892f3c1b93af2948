"""Share groups (KIP-932) through the proxy: Kafka 4.2's own KafkaShareConsumer against the test broker.

The consumer (tests/java/ShareConsume.java) prints one line per poll that returned records; rates are
measured from those lines, after a warm-up that spends the initial burst (quota_window_num = 1, so
the burst is one second of quota). Values are 1000 bytes; the quota counts whole ShareFetch
responses, record batch headers included, so the value rate sits a few percent under the quota.
"""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kafka import KafkaProducer

from kafka_rig import java_program
from tests.support.kafka_clients import WINDOWS, quota_config
from tests.support.kafka_fixtures import needs_share_groups
from tests.support.kafka_helpers import create_topic, unique_topic

pytestmark = [pytest.mark.matrix, needs_share_groups]

QUOTA = 100_000  # bytes/s
RECORD = 1000  # bytes of value per record
RECORDS = 2500  # 2.5 MB: ~24 s at the quota
WARM_UP_MS = 2000
SOURCE = Path(__file__).resolve().parents[1] / "java" / "ShareConsume.java"


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="share-filler", acks="all", linger_ms=5)
    for _ in range(count):
        producer.send(topic, os.urandom(RECORD))
    producer.flush()
    producer.close()


def share_consume(bootstrap: str, client_id: str, topic: str, count: int) -> list[tuple[int, int, int]]:
    """Runs the Java share consumer until it has `count` records (at most 90 s); returns its polls as
    (ms since start, records, value bytes)."""
    group = unique_topic(f"share-{client_id}")
    command = java_program(SOURCE, bootstrap, client_id, group, topic)
    result = subprocess.run([*command, str(count), "90"], capture_output=True, text=True, timeout=150)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    print(result.stdout.splitlines()[-1])
    return [
        (int(at), int(records), int(size))
        for at, records, size in re.findall(r"^poll (\d+) (\d+) (\d+)$", result.stdout, re.MULTILINE)
    ]


def value_rate(polls: list[tuple[int, int, int]]) -> float:
    """Value bytes per second from the first poll after the warm-up to the last one."""
    first = polls[0][0] + WARM_UP_MS
    measured = [poll for poll in polls if poll[0] >= first]
    assert len(measured) >= 5, f"too few polls after the warm-up to measure a rate: {polls}"
    duration_s = (measured[-1][0] - measured[0][0]) / 1000
    return sum(size for _, _, size in measured[1:]) / duration_s


def fetch_throttle_seconds(metrics_port: int, client_id: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    pattern = rf'^quotagate_fetch_throttle_time_seconds_total\{{[^}}]*client_id="{client_id}"[^}}]*\}} (\S+)$'
    return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))


@pytest.mark.java
def test_the_java_share_consumer_receives_every_record_and_its_consumer_byte_rate_holds(proxy_factory, kafka) -> None:
    proxy = proxy_factory(
        kafka.bootstrap, WINDOWS + quota_config(f'client_id = "share-slow"\nconsumer_byte_rate = {QUOTA}')
    )
    topic = unique_topic("share")
    create_topic(proxy.bootstrap, topic, partitions=2)
    produce(proxy.bootstrap, topic, RECORDS)

    # Two share groups, each gets every record: the unlimited consumer runs beside the throttled
    # one (one JVM start and ~24 s less than one after the other); its group and quota are its own.
    with ThreadPoolExecutor(2) as pool:
        free_run = pool.submit(share_consume, proxy.bootstrap, "share-free", topic, RECORDS)
        slow_run = pool.submit(share_consume, proxy.bootstrap, "share-slow", topic, RECORDS)
        free, slow = free_run.result(), slow_run.result()
    assert sum(records for _, records, _ in free) == RECORDS, "the unlimited share consumer missed records"
    assert sum(records for _, records, _ in slow) == RECORDS, "the throttled share consumer missed records"

    free_span_s = max((free[-1][0] - free[0][0]) / 1000, 0.001)
    rate = value_rate(slow)
    throttled_s = fetch_throttle_seconds(proxy.metrics_port, "share-slow")
    print(
        f"share consumer under a {QUOTA} B/s quota: {rate:.0f} B/s of values ({rate / QUOTA:.3f}x); "
        f"unlimited: {RECORDS * RECORD / free_span_s:.0f} B/s; throttle time reported {throttled_s:.1f} s"
    )
    assert 0.85 * QUOTA <= rate <= 1.05 * QUOTA, f"share consumer achieved {rate:.0f} B/s at a {QUOTA} B/s quota"
    assert throttled_s > 5, f"ShareFetch responses carried {throttled_s} s of throttle in all"
    assert fetch_throttle_seconds(proxy.metrics_port, "share-free") == 0
