"""The Kafka test rig itself: a real broker starts, takes a topic, moves records; the
3-node cluster survives a node restart."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient

from tests.kafka_fixtures import KAFKA_BOOTSTRAP, Cluster, RunTool


def _broker_ids(bootstrap: str) -> list[int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"])
    finally:
        admin.close()


def test_single_broker_topic_produce_consume(kafka: Cluster, kafka_tool: RunTool) -> None:
    assert kafka.bootstrap == KAFKA_BOOTSTRAP
    assert _broker_ids(kafka.bootstrap) == [1]
    created = kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        *("--bootstrap-server", kafka.bootstrap, "--create", "--topic", "t"),
        *("--partitions", "3", "--replication-factor", "1"),
    )
    assert "Created topic t" in created.stdout

    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")
    try:
        for partition in range(3):
            producer.send("t", key=b"k%d" % partition, value=b"v%d" % partition, partition=partition)
        producer.flush(timeout=30)
    finally:
        producer.close()

    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition("t", p) for p in range(3)])
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                for record in records:
                    got[tp.partition] = record.value
    finally:
        consumer.close()
    assert got == {0: b"v0", 1: b"v1", 2: b"v2"}


@pytest.mark.cluster
def test_three_nodes_survive_node_restart(kafka_cluster: Cluster) -> None:
    assert _broker_ids(kafka_cluster.bootstrap) == [1, 2, 3]
    assert len({n.pid for n in kafka_cluster.nodes}) == 3

    old_pid = kafka_cluster.node(2).pid
    kafka_cluster.stop_node(2)
    assert not kafka_cluster.node(2).alive
    assert kafka_cluster.node(1).alive and kafka_cluster.node(3).alive

    kafka_cluster.start_node(2)
    node = kafka_cluster.node(2)
    assert node.alive and node.pid != old_pid
    assert _broker_ids(kafka_cluster.bootstrap) == [1, 2, 3]
