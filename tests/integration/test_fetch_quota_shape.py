"""A consumer at a small quota with large fetches, through the proxy and against the broker directly
with a broker-side quota (issue 37 item 3): its received rate and its longest gap between records.

The broker caps a fetch at what the quota allows in its window (KAFKA-9677) and answers a fetch that
arrives while the client is throttled with no data at once (KIP-219); the proxy does both with its
token buckets (docs/quotas.md). Without them a 50 kB/s consumer asking for 50 MB fetches got one huge
response and then a mute as long as it took to pay it off. Measured per client library, direct and
proxied side by side at the same time: the proxied consumer's rate is the quota's within 10 %, and
its longest gap between records no longer than the broker's own.

Two shapes of data: record batches smaller than the window's cap (the broker returns several per
fetch) and larger ones (KIP-74: a fetch returns at least the first batch, whatever its size). A
fetch cut at the cap ends in part of a batch, charged (by the broker as by the proxy) and dropped
by the client, which fetches it again: with one record a batch that costs about 4 % of the rate.

Rates are taken between deliveries (the records of one fetch arrive together) after the first
window, when the initial burst is spent; the gap is the longest between two deliveries.
"""

from __future__ import annotations

import itertools
import logging
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer

from kafka_rig import java_program
from tests.support.kafka_helpers import create_topic, unique_topic

pytestmark = pytest.mark.fetch_shape_only  # a minute or more a test: make test-fetch-shape

QUOTA = 50_000  # consumer_byte_rate, bytes/s
RECORD = 20_000  # bytes per record: 25 records fill one window's cap of 500 kB
SECONDS = 65.0
WARM_UP = 12.0  # the first window: the burst (the broker's sampled window, the proxy's bucket)
FETCH_MAX_BYTES = 52_428_800  # the clients' defaults: 50 MB
PARTITION_MAX_BYTES = 10_485_760
JAVA = Path(__file__).resolve().parents[1] / "java" / "TimedConsume.java"

Records = list[tuple[float, int, int]]  # (seconds since the consumer started, bytes, offset), per record
Deliveries = list[tuple[float, int]]  # (seconds since the consumer started, bytes)


def fill(bootstrap: str, topic: str, records: int, batch_size: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": batch_size, "message.max.bytes": 2_000_000}
    )
    for index in range(records):
        producer.produce(topic, b"v" * RECORD)
        if index % 50 == 0:
            producer.flush()
    producer.flush()


def deliveries(events: Records) -> Deliveries:
    """Records that arrived within 50 ms of each other, as one delivery (one fetch's)."""
    merged: Deliveries = []
    for at, size, _ in sorted(events):
        if merged and at - merged[-1][0] < 0.05:
            merged[-1] = (merged[-1][0], merged[-1][1] + size)
        else:
            merged.append((at, size))
    return merged


def shape(events: Records, seconds: float) -> tuple[float, float, int]:
    """(steady rate in bytes/s, longest gap in s, deliveries): the rate between the deliveries after
    the warm-up; the gap between two deliveries, or from the last one to the end of the run."""
    merged = deliveries(events)
    assert merged, "the consumer received nothing"
    times = [at for at, _ in merged]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)] + [seconds - times[-1]]
    steady = [(at, size) for at, size in merged if at > merged[0][0] + WARM_UP]
    rate = float("nan")
    if len(steady) >= 2:
        rate = sum(size for _, size in steady[1:]) / (steady[-1][0] - steady[0][0])
    return rate, max(gaps), len(merged)


def librdkafka(bootstrap: str, client_id: str, topic: str, seconds: float = SECONDS) -> Records:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap, "client.id": client_id, "group.id": unique_topic("g"),
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "fetch.max.bytes": FETCH_MAX_BYTES, "max.partition.fetch.bytes": PARTITION_MAX_BYTES,
        }
    )  # fmt: skip
    consumer.subscribe([topic])
    events: Records = []
    started = time.monotonic()
    while time.monotonic() < started + seconds:
        for message in consumer.consume(500, timeout=0.2):
            if message.error() is None:
                events.append((time.monotonic() - started, len(message.value()), message.offset()))
    consumer.close()
    return events


def kafka_python(bootstrap: str, client_id: str, topic: str, seconds: float = SECONDS) -> Records:
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, client_id=client_id, group_id=unique_topic("g"),
        auto_offset_reset="earliest", enable_auto_commit=False,
        fetch_max_bytes=FETCH_MAX_BYTES, max_partition_fetch_bytes=PARTITION_MAX_BYTES,
    )  # fmt: skip
    events: Records = []
    started = time.monotonic()
    while time.monotonic() < started + seconds:
        for records in consumer.poll(timeout_ms=200).values():
            for record in records:
                events.append((time.monotonic() - started, len(record.value), record.offset))
    consumer.close()
    return events


# The Java client's fetch-session messages (FetchSessionHandler, INFO), to stderr.
JAVA_LOGGING = """status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %c: %m%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
logger.sessions.name = org.apache.kafka.clients.FetchSessionHandler
logger.sessions.level = info
"""
java_logs: list[str] = []  # each Java consumer's stderr, for the session checks


def java(bootstrap: str, client_id: str, topic: str, seconds: float = SECONDS) -> Records:
    config = Path(tempfile.mkdtemp()) / "log4j2.properties"
    config.write_text(JAVA_LOGGING)
    command = java_program(
        JAVA, bootstrap, client_id, topic, str(seconds), str(FETCH_MAX_BYTES), str(PARTITION_MAX_BYTES)
    )
    command.insert(1, f"-Dlog4j2.configurationFile={config}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 90, check=True)
    java_logs.append(done.stderr)
    return [
        (float(at), int(size), int(offset)) for at, size, offset in (line.split() for line in done.stdout.splitlines())
    ]


CLIENTS = {"librdkafka": librdkafka, "kafka-python": kafka_python, "java": java}


@pytest.mark.java
@pytest.mark.parametrize(
    "batch_size",
    [25_000, 1_000_000],  # a record a batch; 50 records a batch (1 MB, twice the cap)
    ids=["batches-under-the-cap", "batches-over-the-cap"],
)
def test_a_small_quota_with_large_fetches_is_held_at_its_rate_with_gaps_no_longer_than_the_brokers(
    proxy_factory, kafka, kafka_tool, batch_size: int
) -> None:
    """Each library's consumer, direct and proxied, all at once (each its own client id and quota).
    With record batches larger than the window's cap the broker never delivers one (each fetch would
    take the client over its quota: answered empty, again and again); the proxy delivers them."""
    run = uuid.uuid4().hex[:6]
    ids = {(library, path): f"fq-{path}-{library}-{run}" for library in CLIENTS for path in ("direct", "proxied")}
    quotas = "".join(
        f'[[quotas]]\nclient_id = "{client_id}"\nconsumer_byte_rate = {QUOTA}\n'
        for (_, path), client_id in ids.items()
        if path == "proxied"
    )
    proxy = proxy_factory(kafka.bootstrap, quotas)
    direct_ids = [client_id for (_, path), client_id in ids.items() if path == "direct"]
    for client_id in direct_ids:
        kafka_tool(
            "configs", "--bootstrap-server", kafka.bootstrap, "--alter", "--add-config", f"consumer_byte_rate={QUOTA}",
            "--entity-type", "clients", "--entity-name", client_id,
        )  # fmt: skip
    topic = unique_topic("fq")
    create_topic(kafka.bootstrap, topic, partitions=1)
    fill(kafka.bootstrap, topic, int(QUOTA * SECONDS * 1.5 / RECORD), batch_size)  # more than any may read
    results: dict[tuple[str, str], Records] = {}

    def consume(library: str, path: str) -> None:
        bootstrap = kafka.bootstrap if path == "direct" else proxy.bootstrap
        results[(library, path)] = CLIENTS[library](bootstrap, ids[(library, path)], topic)

    threads = [threading.Thread(target=consume, args=key) for key in ids]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(SECONDS + 120)
    finally:
        for client_id in direct_ids:
            kafka_tool(
                "configs", "--bootstrap-server", kafka.bootstrap, "--alter", "--delete-config", "consumer_byte_rate",
                "--entity-type", "clients", "--entity-name", client_id,
            )  # fmt: skip
    failures = []
    for library in CLIENTS:
        direct_rate, direct_gap, direct_count = shape(results[(library, "direct")], SECONDS)
        rate, gap, count = shape(results[(library, "proxied")], SECONDS)
        print(
            f"{library}, {QUOTA} B/s, {SECONDS:.0f} s, {RECORD} B records in batches of {batch_size} B, "
            f"fetch.max.bytes {FETCH_MAX_BYTES}: proxied {rate / QUOTA:.3f}x, longest gap {gap:.2f} s, "
            f"{count} deliveries; "
            f"direct {direct_rate / QUOTA:.3f}x, longest gap {direct_gap:.2f} s, {direct_count} deliveries"
        )
        for path in ("direct", "proxied"):
            timeline = [(round(at, 1), size // 1000) for at, size in deliveries(results[(library, path)])]
            print(f"  {path} deliveries (s, kB): {timeline}")
        if not rate == pytest.approx(QUOTA, rel=0.10):
            failures.append(f"proxied {library} consumer received {rate:.0f} B/s")
        if gap > direct_gap + 0.5:
            failures.append(f"proxied {library} gap {gap:.2f} s, the broker's {direct_gap:.2f} s")
    assert not failures, failures


@pytest.mark.java
@pytest.mark.parametrize("library", list(CLIENTS))
def test_two_connections_of_one_client_share_its_quota_and_keep_their_fetch_sessions(
    proxy_factory, kafka, library: str
) -> None:
    """Two consumers of one client id (in groups of their own: one connection each), one quota: while
    one connection's answer put the client in debt, the other's fetches arrive throttled and are
    answered with no data (the proxy's own answer to a full or sessionless fetch, the broker's emptied
    for an incremental one). Each consumer still reads every record once, in order, and the Java
    client and kafka-python, which keep incremental fetch sessions, never see a session error."""
    client_id = f"fq-shared-{uuid.uuid4().hex[:6]}"
    proxy = proxy_factory(kafka.bootstrap, f'[[quotas]]\nclient_id = "{client_id}"\nconsumer_byte_rate = {QUOTA}\n')
    topic = unique_topic("fq")
    create_topic(kafka.bootstrap, topic, partitions=1)
    fill(kafka.bootstrap, topic, int(QUOTA * 40 / RECORD), 25_000)
    seconds = 30.0
    results: list[Records] = []
    kafka_python_log = _LogLines("kafka.consumer.fetcher")
    java_logs.clear()

    def consume() -> None:
        results.append(CLIENTS[library](proxy.bootstrap, client_id, topic, seconds))

    threads = [threading.Thread(target=consume) for _ in range(2)]
    with kafka_python_log:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(seconds + 120)
    full = _metric(proxy.metrics_port, 'quotagate_throttled_fetches_total{session="full"}')
    incremental = _metric(proxy.metrics_port, 'quotagate_throttled_fetches_total{session="incremental"}')
    emptied = full + incremental
    together = sum(size for records in results for _, size, _ in records) / seconds
    print(
        f"{library}: two consumers of one client id, {together / QUOTA:.2f}x of the quota together over "
        f"{seconds:.0f} s (bursts included); fetches answered empty: {full:.0f} full or sessionless, "
        f"{incremental:.0f} incremental"
    )
    assert emptied > 0, "no fetch arrived while the client was throttled: nothing was tried"
    if library != "librdkafka":  # librdkafka keeps no fetch sessions (it sends epoch -1)
        assert incremental > 0, "no incremental fetch arrived while the client was throttled"
    for records in results:
        offsets = [offset for _, _, offset in records]
        assert offsets == list(range(len(offsets))), "every record once, in order"
        assert offsets, "each consumer read records"
    session_errors = [
        line
        for line in kafka_python_log.lines + [line for log in java_logs for line in log.splitlines()]
        if "unable to process the fetch request" in line or "invalid" in line.lower()
    ]
    assert session_errors == []


class _LogLines(logging.Handler):
    """The INFO messages of one logger while in a `with` block."""

    def __init__(self, name: str) -> None:
        super().__init__(logging.INFO)
        self.logger = logging.getLogger(name)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> _LogLines:
        self.saved_level = self.logger.level
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.saved_level)


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0
