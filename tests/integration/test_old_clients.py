"""Old clients through the proxy to a Kafka 3.x broker, as direct (issue 37 item 2).

Kafka 3.x still takes the versions 4.0 removed (KIP-896): Produce v0-v2 with magic 0 and 1 message
sets, Fetch v0-v3, Metadata v0-v3. The clients here speak them for real: kafka-python told an old
api_version, librdkafka with api.version.request=false and a broker.version.fallback below 0.10, and raw
frames where no client sends a version. They go through as direct, are charged, and, since they
ignore throttle_time_ms (KIP-219 came later), are held to their quota by the proxy's mute. The
proxy's usage records say which versions each client really used.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from struct import pack

import pytest
from confluent_kafka import Consumer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record import MemoryRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from quotagate.protocol.apis import ApiKey
from tests.support.kafka_clients import (
    QUOTA,
    WINDOWS,
    Acked,
    confluent_producer_loop,
    kafka_python_producer_loop,
    quota_config,
    rate_between,
)
from tests.support.kafka_fixtures import KAFKA_VARIANT, needs_old_protocol
from tests.support.kafka_helpers import create_topic, round_trip, unique_topic, wait_until
from tests.support.proxy_fixtures import PROXY_HOST

pytestmark = [pytest.mark.matrix, needs_old_protocol]

# How each client is told to speak an old protocol, and the Produce version and message format that
# makes it send (kafka-python: its api_version table; librdkafka: broker.version.fallback).
KAFKA_PYTHON = {"0.8.2": (0, 8, 2), "0.9": (0, 9), "0.10": (0, 10, 0)}
# librdkafka asks ApiVersions whatever api.version.request says once broker.version.fallback is 0.10 or
# more (its CONFIGURATION.md: "Any other value >= 0.10 ... enables ApiVersionRequests"), and then uses
# today's versions: only the fallbacks below 0.10 make it speak the old protocol.
LIBRDKAFKA = {"0.8.2": {"api.version.request": False, "broker.version.fallback": "0.8.2"},
              "0.9.0": {"api.version.request": False, "broker.version.fallback": "0.9.0"}}  # fmt: skip
PRODUCE_VERSION = {"kafka-python 0.8.2": 0, "kafka-python 0.9": 1, "kafka-python 0.10": 2,
                   "librdkafka 0.8.2": 0, "librdkafka 0.9.0": 1}  # fmt: skip
USAGE = '[usage]\nenabled = true\nsink = "jsonl"\nrecords = "request"\ndirectory = "{directory}"\nflush_interval_seconds = 0.2\nmax_file_seconds = 1.0\n'  # noqa: E501


def usage_toml(directory: Path) -> str:
    return USAGE.format(directory=directory)


def used_versions(directory: Path, client_id: str) -> dict[int, set[int]]:
    """{api key: the versions} a client's requests used, from the proxy's usage records (v1: one a request)."""
    used: dict[int, set[int]] = {}
    for path in directory.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("client_id") == client_id:
                used.setdefault(record["api_key"], set()).add(record["api_version"])
    return used


def produce_old(bootstrap: str, client: str, topic: str, client_id: str, values: list[bytes]) -> None:
    name, _, version = client.partition(" ")
    if name == "kafka-python":
        producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, api_version=KAFKA_PYTHON[version])
        for value in values:
            producer.send(topic, value=value, partition=0)
        producer.flush(30)
        producer.close(30)
        return
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, **LIBRDKAFKA[version]})
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0


def consume_old_kafka_python(bootstrap: str, topic: str, client_id: str, count: int) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, client_id=client_id, api_version=(0, 10, 0), auto_offset_reset="earliest"
    )
    consumer.assign([TopicPartition(topic, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(record.value for record in records)
    consumer.close()
    return got


def consume_old_librdkafka(bootstrap: str, topic: str, client_id: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": unique_topic("old-g"),
            "auto.offset.reset": "earliest",
            **LIBRDKAFKA["0.9.0"],
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    return got


# make test's 3.9 slice: Produce v0 and v1 (magic 0) and v2 (magic 1), both clients; the matrix runs all.
SLICE_CLIENTS = ("kafka-python 0.8.2", "kafka-python 0.10", "librdkafka 0.9.0")


@pytest.mark.parametrize(
    "client",
    [
        pytest.param(client, marks=[pytest.mark.version_slice] if client in SLICE_CLIENTS else [])
        for client in PRODUCE_VERSION
    ],
)
def test_an_old_client_gets_out_through_the_proxy_what_it_put_in_in_its_own_versions(
    proxy_factory, kafka, tmp_path: Path, client: str
) -> None:
    proxy = proxy_factory(kafka.bootstrap, proxy_toml="", extra_toml=usage_toml(tmp_path))
    topic = unique_topic("old")
    create_topic(kafka.bootstrap, topic, partitions=1)
    values = [f"{client} {i}".encode() + os.urandom(i % 50) for i in range(300)]
    client_id = "old-" + client.replace(" ", "-")
    produce_old(proxy.bootstrap, client, topic, client_id, values)
    consumed = (consume_old_kafka_python if client.startswith("kafka-python") else consume_old_librdkafka)(
        proxy.bootstrap, topic, client_id + "-reader", len(values)
    )
    assert consumed == values, "everything, once, in order"
    wait_until(lambda: ApiKey.FETCH in used_versions(tmp_path, client_id + "-reader"), 20, "the usage records")
    produced = used_versions(tmp_path, client_id)
    fetched = used_versions(tmp_path, client_id + "-reader")
    print(f"Kafka {KAFKA_VARIANT}, {client}: produce {produced}, consume {fetched}")
    assert produced[ApiKey.PRODUCE] == {PRODUCE_VERSION[client]}
    assert max(fetched[ApiKey.FETCH]) <= 4 and max(produced.get(ApiKey.METADATA, {0})) <= 4


def framed(request, correlation_id: int) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="raw-old")
    return bytes(request.encode(header=True, framed=True))


def message_set(magic: int, values: list[bytes]) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    for offset, value in enumerate(values):
        builder.append(offset, None if magic == 0 else int(time.time() * 1000), None, value)
    return bytes(builder.build())


def message_values(records: bytes) -> list[bytes]:
    memory, values = MemoryRecords(records), []
    while (batch := memory.next_batch()) is not None:
        values.extend(record.value for record in batch)
    return values


@pytest.mark.version_slice
def test_raw_old_frames_are_answered_through_the_proxy_as_direct_and_name_no_broker(proxy_factory, kafka) -> None:
    proxy = proxy_factory(kafka.bootstrap)
    topic = unique_topic("raw-old")
    create_topic(kafka.bootstrap, topic, partitions=1)
    direct_port = kafka.nodes[0].port
    for version, magic in ((0, 0), (1, 0), (2, 1)):
        for port in (direct_port, proxy.port):
            request = ProduceRequest(
                version=version, acks=1, timeout_ms=10_000,
                topic_data=[(topic, [(0, message_set(magic, [f"v{version}-{port}-{i}".encode() for i in range(3)]))])],
            )  # fmt: skip
            answer = ProduceResponse.decode(memoryview(round_trip(port, framed(request, 11)))[4:], version=version)
            (partition,) = answer.responses[0].partition_responses
            assert partition.error_code == 0, (version, port)
    expected = [f"v{v}-{port}-{i}".encode() for v in (0, 1, 2) for port in (direct_port, proxy.port) for i in range(3)]
    for version in (0, 1, 2, 3):
        answers = []
        for port in (direct_port, proxy.port):
            partition = FetchRequest.FetchTopic.FetchPartition(
                version=version, partition=0, fetch_offset=0, partition_max_bytes=1 << 20
            )
            request = FetchRequest(
                version=version, replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20,
                topics=[FetchRequest.FetchTopic(version=version, topic=topic, partitions=[partition])],
            )  # fmt: skip
            answers.append(round_trip(port, framed(request, 12))[4:])
        assert answers[0] == answers[1], f"Fetch v{version}: the proxy forwards the broker's bytes as they are"
        decoded = FetchResponse.decode(memoryview(answers[1]), version=version)
        values = message_values(bytes(decoded.responses[0].partitions[0].records))
        # Down-converted to magic 1 (v2-v3), the records outgrow the stored size and the broker cuts the last
        # ones off, for the client to fetch again: a prefix, the same one both ways.
        assert values and values == expected[: len(values)], f"Fetch v{version}: {values}"
    for version in (0, 1, 2, 3):
        request = MetadataRequest(version=version, topics=[topic])
        direct = MetadataResponse.decode(memoryview(round_trip(direct_port, framed(request, 13)))[4:], version)
        through = MetadataResponse.decode(memoryview(round_trip(proxy.port, framed(request, 13)))[4:], version)
        assert [(b.node_id, b.host, b.port) for b in through.brokers] == [(1, PROXY_HOST, proxy.broker_port(1))]
        assert [(t.name, len(t.partitions)) for t in through.topics] == [
            (t.name, len(t.partitions)) for t in direct.topics
        ]


def set_broker_quota(kafka_tool, bootstrap: str, client_id: str, key: str, value: int | None) -> None:
    change = ["--add-config", f"{key}={value}"] if value is not None else ["--delete-config", key]
    kafka_tool("configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "clients",
               "--entity-name", client_id, *change)  # fmt: skip


def limited(proxy_factory, kafka, kafka_tool, enforcer: str, client_id: str, key: str) -> str:
    """Where the client connects to be held to QUOTA: a proxy with that quota, or the broker with it set."""
    if enforcer == "proxy":
        quota = quota_config(f'client_id = "{client_id}"\n{key} = {QUOTA}')
        return proxy_factory(kafka.bootstrap, WINDOWS + quota).bootstrap
    set_broker_quota(kafka_tool, kafka.bootstrap, client_id, key, QUOTA)
    return kafka.bootstrap


def assert_held(rate: float, enforcer: str, client: str) -> None:
    """Through the proxy: within 10 % of the quota. Direct, the broker's own quota is the figure beside
    it, not the proxy's to meet: it binds (at most 15 % over), and that is all asserted (3.9 held
    kafka-python 0.10 at 0.60x: the broker delays an old client's response by its throttle time, and
    kafka-python sends nothing meanwhile)."""
    if enforcer == "proxy":
        assert rate == pytest.approx(QUOTA, rel=0.10), f"{client} achieved {rate:.0f} B/s through the proxy"
    else:
        assert rate < QUOTA * 1.15, f"the broker's quota let {client} reach {rate:.0f} B/s"


PRODUCERS = {
    "kafka-python 0.10": lambda bootstrap, topic, client_id, seconds, acked: kafka_python_producer_loop(
        bootstrap, topic, client_id, seconds, acked, {"api_version": (0, 10, 0)}
    ),
    "librdkafka 0.9.0": lambda bootstrap, topic, client_id, seconds, acked: confluent_producer_loop(
        bootstrap, topic, client_id, seconds, acked, LIBRDKAFKA["0.9.0"]
    ),
}


@pytest.mark.parametrize(
    ("client", "enforcer"),
    [
        pytest.param("kafka-python 0.10", "proxy", marks=pytest.mark.version_slice),
        ("librdkafka 0.9.0", "proxy"),
        ("kafka-python 0.10", "broker"),
        ("librdkafka 0.9.0", "broker"),
    ],
)
def test_an_old_producer_is_held_to_its_producer_byte_rate(proxy_factory, kafka, kafka_tool, client, enforcer) -> None:
    """Produce v2 with magic 1 (kafka-python) and v1 with magic 0 (librdkafka): the proxy's mute holds
    them within 10 % of the quota, as the broker's own quota does direct (the figure beside it)."""
    client_id = unique_topic("old-limited")
    bootstrap = limited(proxy_factory, kafka, kafka_tool, enforcer, client_id, "producer_byte_rate")
    topic = unique_topic("old-rate")
    create_topic(kafka.bootstrap, topic, partitions=2)
    seconds, acked = 24.0, Acked()
    started = time.monotonic()
    try:
        PRODUCERS[client](bootstrap, topic, client_id, seconds, acked)
    finally:
        if enforcer == "broker":
            set_broker_quota(kafka_tool, kafka.bootstrap, client_id, "producer_byte_rate", None)
    rate = rate_between(acked.events, started + 4, started + seconds)
    print(f"Kafka {KAFKA_VARIANT}: {client} held by the {enforcer}: {rate / QUOTA:.3f}x of {QUOTA} B/s")
    assert_held(rate, enforcer, client)


@pytest.mark.parametrize("enforcer", ["proxy", "broker"])
def test_an_old_consumer_is_held_to_its_consumer_byte_rate(proxy_factory, kafka, kafka_tool, enforcer) -> None:
    """kafka-python speaking 0.10 (Fetch v2, message sets of magic 1)."""
    client_id = unique_topic("old-reader")
    topic = unique_topic("old-cq")
    create_topic(kafka.bootstrap, topic, partitions=1)
    filler = Acked()
    kafka_python_producer_loop(kafka.bootstrap, topic, "old-filler", 8.0, filler, {"api_version": (0, 10, 0)})
    bootstrap = limited(proxy_factory, kafka, kafka_tool, enforcer, client_id, "consumer_byte_rate")
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, client_id=client_id, api_version=(0, 10, 0), auto_offset_reset="earliest",
        max_partition_fetch_bytes=32768, fetch_max_bytes=65536,
    )  # fmt: skip
    consumer.assign([TopicPartition(topic, 0)])
    received: list[tuple[float, int]] = []
    started = time.monotonic()
    try:
        while time.monotonic() < started + 22:
            for records in consumer.poll(timeout_ms=200).values():
                received.extend((time.monotonic(), len(record.value)) for record in records)
    finally:
        consumer.close()
        if enforcer == "broker":
            set_broker_quota(kafka_tool, kafka.bootstrap, client_id, "consumer_byte_rate", None)
    assert sum(size for _, size in received) < sum(size for _, size in filler.events), "the quota must bind"
    rate = rate_between(received, started + 4, started + 22)
    print(f"Kafka {KAFKA_VARIANT}: kafka-python 0.10 consumer held by the {enforcer}: {rate / QUOTA:.3f}x")
    assert_held(rate, enforcer, "the kafka-python 0.10 consumer")


def test_an_old_producer_never_meets_producer_ids_rate_as_the_broker_counts_no_id(
    proxy_factory, kafka, tmp_path
) -> None:
    """Message sets carry no producer ID: the broker's producer-ID quota (KIP-936) counts none for them,
    and neither does the proxy's producer_ids_rate, however many producers come and go."""
    client_id = unique_topic("old-churn")
    proxy = proxy_factory(kafka.bootstrap, quota_config(f'client_id = "{client_id}"\nproducer_ids_rate = 0.01'))
    topic = unique_topic("old-ids")
    create_topic(kafka.bootstrap, topic, partitions=1)
    for index in range(5):
        produce_old(proxy.bootstrap, "kafka-python 0.10", topic, client_id, [pack(">i", index)])
    assert consume_old_kafka_python(proxy.bootstrap, topic, client_id + "-reader", 5) == [
        pack(">i", i) for i in range(5)
    ]
