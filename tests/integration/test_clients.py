"""Every kind of client produces and consumes through the proxy, and gets out exactly what went in."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

from tests.support.kafka_helpers import by_partition, create_topic, payloads, unique_topic

pytestmark = pytest.mark.matrix

COUNT = 3000


def test_kafka_python_gets_out_what_it_put_in_through_the_proxy(proxy) -> None:
    topic = unique_topic("kp")
    create_topic(proxy.bootstrap, topic, partitions=3)
    sent = payloads("kp", COUNT)
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all", linger_ms=5)
    futures = [producer.send(topic, key=k, value=v) for k, v in sent]
    producer.flush()
    acked = [(f.get(timeout=30).partition, k, v) for f, (k, v) in zip(futures, sent, strict=True)]
    producer.close()

    consumer = KafkaConsumer(
        topic, bootstrap_servers=proxy.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10000
    )
    received = []
    for message in consumer:
        received.append((message.partition, message.key, message.value))
        if len(received) == COUNT:
            break
    consumer.close()
    assert by_partition(received) == by_partition(acked)


async def test_aiokafka_gets_out_what_it_put_in_through_the_proxy(proxy) -> None:
    topic = unique_topic("aio")
    create_topic(proxy.bootstrap, topic, partitions=3)
    sent = payloads("aio", COUNT)
    producer = AIOKafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, key=k, value=v) for k, v in sent]
        metadata = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    acked = [(m.partition, k, v) for m, (k, v) in zip(metadata, sent, strict=True)]

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=proxy.bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    received = []
    try:
        async with asyncio.timeout(30):
            while len(received) < COUNT:
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    received.extend((r.partition, r.key, r.value) for r in records)
    finally:
        await consumer.stop()
    assert by_partition(received) == by_partition(acked)


def test_confluent_kafka_gets_out_what_it_put_in_through_the_proxy(proxy) -> None:
    topic = unique_topic("rdk")
    create_topic(proxy.bootstrap, topic, partitions=3)
    sent = payloads("rdk", COUNT)
    acked: list[tuple[int, bytes, bytes]] = []
    errors: list[object] = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.key(), msg.value()))

    producer = Producer({"bootstrap.servers": proxy.bootstrap, "acks": "all", "enable.idempotence": True})
    for key, value in sent:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []

    consumer = Consumer(
        {"bootstrap.servers": proxy.bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    received = []
    for _ in range(300):
        for msg in consumer.consume(500, timeout=0.2):
            assert msg.error() is None, msg.error()
            received.append((msg.partition(), msg.key(), msg.value()))
        if len(received) >= COUNT:
            break
    consumer.close()
    assert by_partition(received) == by_partition(acked)


@pytest.mark.java
def test_java_console_producer_and_consumer_through_the_proxy(proxy, kafka_tool) -> None:
    topic = unique_topic("console")
    create_topic(proxy.bootstrap, topic, partitions=1)
    lines = [f"line-{i}-{'x' * (i % 50)}" for i in range(500)]
    kafka_tool(
        "console-producer",
        "--bootstrap-server", proxy.bootstrap,
        "--topic", topic,
        "--command-property", "acks=all",
        input="\n".join(lines) + "\n",
    )  # fmt: skip
    result = kafka_tool(
        "console-consumer",
        "--bootstrap-server", proxy.bootstrap,
        "--topic", topic,
        "--from-beginning",
        "--max-messages", str(len(lines)),
        "--timeout-ms", "30000",
    )  # fmt: skip
    assert result.stdout.splitlines() == lines


@pytest.mark.java
def test_java_perf_producer_and_consumer_through_the_proxy(proxy, kafka_tool) -> None:
    topic = unique_topic("perf")
    create_topic(proxy.bootstrap, topic, partitions=3)
    records = 50000
    produced = kafka_tool(
        "producer-perf",
        "--topic", topic,
        "--num-records", str(records),
        "--record-size", "1024",
        "--throughput", "-1",
        "--command-property", f"bootstrap.servers={proxy.bootstrap}", "acks=all",
    )  # fmt: skip
    assert f"{records} records sent" in produced.stdout
    consumed = kafka_tool(
        "consumer-perf",
        "--bootstrap-server", proxy.bootstrap,
        "--topic", topic,
        "--messages", str(records),
        "--timeout", "30000",
    )  # fmt: skip
    # ConsumerPerformance prints a CSV header and one row of totals.
    lines = [line.split(",") for line in consumed.stdout.splitlines() if "," in line]
    header = [column.strip() for column in lines[0]]
    total = int(lines[-1][header.index("data.consumed.in.nMsg")].strip())
    assert total == records, consumed.stdout
