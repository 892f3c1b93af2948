"""Consumer groups and topic administration through the proxy, with Python and Java clients."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as ConfluentNewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from tests.support.kafka_helpers import create_topic, unique_topic, wait_until

pytestmark = pytest.mark.matrix


class GroupMember(threading.Thread):
    """A kafka-python consumer polling in its own thread; records its assignment and what it read."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            heartbeat_interval_ms=500,
            session_timeout_ms=10000,
            # kafka-python may join before its metadata names the new topic ("No partition metadata
            # for topic", so it is assigned nothing) and looks again only at metadata_max_age_ms,
            # 5 min by default: at a load average of 34 the first member owned nothing for 30 s.
            metadata_max_age_ms=1000,
        )
        self.values: list[bytes] = []
        self.assignment: set[int] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for records in self.consumer.poll(timeout_ms=200).values():
                self.values.extend(r.value for r in records)
            self.assignment = {tp.partition for tp in self.consumer.assignment()}
        self.consumer.close()


def test_a_group_of_two_rebalances_through_the_proxy_and_reads_everything_once(proxy) -> None:
    topic, group = unique_topic("grp"), unique_topic("g")
    create_topic(proxy.bootstrap, topic, partitions=4)
    first = GroupMember(proxy.bootstrap, topic, group)
    first.start()
    wait_until(lambda: first.assignment == {0, 1, 2, 3}, 30, "the first member to own all 4 partitions")

    second = GroupMember(proxy.bootstrap, topic, group)
    second.start()
    wait_until(
        lambda: len(first.assignment) == 2 and len(second.assignment) == 2 and not first.assignment & second.assignment,
        45,
        "the rebalance to give each member 2 partitions",
    )
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap)
    sent = [f"m{i}".encode() for i in range(400)]
    for value in sent:
        producer.send(topic, value=value)
    producer.flush()
    producer.close()
    wait_until(lambda: len(first.values) + len(second.values) >= len(sent), 30, "all 400 records to be read")
    for member in (first, second):
        member.stopping.set()
        member.join(10)
    assert sorted(first.values + second.values) == sorted(sent)
    assert first.values and second.values, "both members must have read their partitions"


def test_kafka_python_admin_creates_describes_and_deletes_topics(proxy) -> None:
    topic = unique_topic("adm")
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 5, 1)])
        wait_until(lambda: topic in admin.list_topics(), 15, "the topic to be listed")
        (described,) = admin.describe_topics([topic])
        assert len(described["partitions"]) == 5
        admin.delete_topics([topic])
        wait_until(lambda: topic not in admin.list_topics(), 15, "the topic to be gone")
    finally:
        admin.close()


def test_confluent_admin_creates_describes_and_deletes_topics(proxy) -> None:
    topic = unique_topic("cadm")
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    admin.create_topics([ConfluentNewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    wait_until(lambda: topic in admin.list_topics(timeout=10).topics, 15, "the topic to be listed")
    metadata = admin.list_topics(topic, timeout=10)
    assert len(metadata.topics[topic].partitions) == 2
    admin.delete_topics([topic])[topic].result(30)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 15, "the topic to be gone")


@pytest.mark.java
def test_java_topic_command_creates_describes_and_deletes_topics(proxy, kafka_tool) -> None:
    topic = unique_topic("jadm")
    server = ("--bootstrap-server", proxy.bootstrap)
    kafka_tool("topics", *server, "--create", "--topic", topic, "--partitions", "3", "--replication-factor", "1")
    described = kafka_tool("topics", *server, "--describe", "--topic", topic).stdout
    assert described.count(f"Topic: {topic}\tPartition:") == 3, described
    kafka_tool("topics", *server, "--delete", "--topic", topic)
    wait_until(lambda: topic not in kafka_tool("topics", *server, "--list").stdout.split(), 30, "the topic to be gone")


def test_java_admin_describes_the_cluster_with_proxy_addresses_only(proxy, kafka, kafka_tool) -> None:
    # kafka-python's describe_cluster and the topic tool both go through DescribeCluster/Metadata.
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap)
    try:
        brokers = admin.describe_cluster()["brokers"]
    finally:
        admin.close()
    assert [(b["host"], b["port"]) for b in brokers] == [("127.0.0.1", proxy.broker_port(1))]
    create_topic(proxy.bootstrap, unique_topic("x"))  # any admin call works after that
