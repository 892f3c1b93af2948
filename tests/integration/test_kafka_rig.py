"""The Kafka test rig itself: a real broker starts, takes a topic, moves records; the
3-node cluster survives a node restart; the SASL_PLAINTEXT listener authenticates users."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaTimeoutError

from tests.support.kafka_fixtures import (
    KAFKA_BOOTSTRAP,
    KAFKA_SASL_BOOTSTRAP,
    KAFKA_SASL_PORT,
    SASL_USERS,
    Cluster,
    KafkaRigError,
    RunTool,
)


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


# --------------------------------------------------------------------------- SASL listener


def _kp_sasl(user: str, password: str) -> dict[str, Any]:
    """kafka-python settings for the `kafka` fixture's SASL_PLAINTEXT/PLAIN listener."""
    return {
        "bootstrap_servers": KAFKA_SASL_BOOTSTRAP,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


def _ck_sasl(user: str, password: str) -> dict[str, Any]:
    """confluent-kafka (librdkafka) settings for the same listener."""
    return {
        "bootstrap.servers": KAFKA_SASL_BOOTSTRAP,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
    }


def test_sasl_settings_are_saved_and_checked(tmp_path: Path) -> None:
    """No JVM: the SASL layout lands in cluster.json, survives attach, and can be dropped
    while the cluster is stopped; a cluster without it says so."""
    users = {"alice": "alice-secret", "bob": 'b"\\ö'}
    cluster = Cluster.create("sasl-unit", brokers=2, base_port=41000, workdir=tmp_path, sasl_users=users)
    assert cluster.bootstrap == "127.0.0.1:41000,127.0.0.1:41001"
    assert cluster.sasl_bootstrap == "127.0.0.1:41400,127.0.0.1:41401"  # default: base port + 400
    attached = Cluster.attach("sasl-unit", workdir=tmp_path)
    assert attached is not None and attached.sasl_users == users
    assert attached.sasl_bootstrap == cluster.sasl_bootstrap

    attached._write_properties(attached.node(2))
    props = attached.node(2).properties.read_text()
    assert "SASL_PLAINTEXT://127.0.0.1:41401" in props
    assert "inter.broker.listener.name=PLAINTEXT\n" in props
    # JAAS-quoted, then escaped again for java.util.Properties.
    assert 'user_bob="b\\\\"\\\\\\\\\\u00f6"' in props

    plain = Cluster.create("sasl-unit", brokers=2, base_port=41000, workdir=tmp_path)
    with pytest.raises(KafkaRigError, match="no SASL listener"):
        _ = plain.sasl_bootstrap
    reattached = Cluster.attach("sasl-unit", workdir=tmp_path)
    assert reattached is not None and not reattached.has_sasl
    with pytest.raises(KafkaRigError, match="sasl_base_port given without sasl_users"):
        Cluster.create("sasl-unit", brokers=2, base_port=41000, workdir=tmp_path, sasl_base_port=41500)
    with pytest.raises(KafkaRigError, match="overlap"):
        Cluster.create(
            "sasl-unit", brokers=2, base_port=41000, workdir=tmp_path, sasl_users=users, sasl_base_port=41101
        )


def test_kafka_fixture_has_sasl_listener(kafka: Cluster) -> None:
    assert kafka.sasl_bootstrap == KAFKA_SASL_BOOTSTRAP
    assert set(SASL_USERS) == {"admin", "alice", "bob", "carol"}
    attached = Cluster.attach(kafka.name, workdir=kafka.workdir)
    assert attached is not None and attached.sasl_bootstrap == KAFKA_SASL_BOOTSTRAP
    assert attached.sasl_users == SASL_USERS


def test_sasl_kafka_python_produce_consume(kafka: Cluster) -> None:
    topic = f"sasl-kp-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(**_kp_sasl("admin", SASL_USERS["admin"]))
    try:
        # Metadata asked on the SASL listener advertises the SASL listener.
        assert [(b["host"], b["port"]) for b in admin.describe_cluster()["brokers"]] == [("127.0.0.1", KAFKA_SASL_PORT)]
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        admin.close()

    producer = KafkaProducer(**_kp_sasl("alice", SASL_USERS["alice"]), acks="all")
    try:
        for i in range(3):
            producer.send(topic, value=b"alice-%d" % i).get(timeout=15)
    finally:
        producer.close()

    consumer = KafkaConsumer(**_kp_sasl("bob", SASL_USERS["bob"]), auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
    finally:
        consumer.close()
    assert got == [b"alice-0", b"alice-1", b"alice-2"]


def test_sasl_confluent_produce_consume(kafka: Cluster) -> None:
    topic = f"sasl-ck-{uuid.uuid4().hex[:8]}"
    admin = confluent_kafka.admin.AdminClient(_ck_sasl("admin", SASL_USERS["admin"]))
    for future in admin.create_topics([confluent_kafka.admin.NewTopic(topic, 1, 1)]).values():
        future.result(timeout=15)

    producer = confluent_kafka.Producer({**_ck_sasl("carol", SASL_USERS["carol"]), "acks": "all"})
    errors: list[Any] = []
    for i in range(3):
        producer.produce(topic, value=b"carol-%d" % i, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(15) == 0
    assert errors == [None, None, None]

    consumer = confluent_kafka.Consumer(
        {**_ck_sasl("alice", SASL_USERS["alice"]), "group.id": f"g-{topic}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [b"carol-0", b"carol-1", b"carol-2"]


def _failed_auths(cluster: Cluster) -> int:
    """How many failed SASL authentications the broker has logged (INFO, server.log)."""
    return sum(
        node.server_log.read_text(errors="replace").count("Failed authentication with") for node in cluster.nodes
    )


def test_sasl_wrong_password_is_rejected(kafka: Cluster) -> None:
    # kafka-python 3.0.12 does not raise the SASL failure during bootstrap: it logs it,
    # retries, and raises KafkaTimeoutError once bootstrap_timeout_ms is up. Its own log
    # does not always name the cause either: its transport drops bytes read together with
    # EOF, and the broker closes right after its SaslAuthenticate error response, so some
    # attempts are logged as "socket disconnected". Hence the broker's log is the witness.
    before = _failed_auths(kafka)
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(**_kp_sasl("bob", "not-bob-secret"), bootstrap_timeout_ms=1500)
    assert _failed_auths(kafka) > before

    # confluent-kafka reports it through error_cb, as an _AUTHENTICATION error.
    for user, password in [("alice", "not-alice-secret"), ("mallory", SASL_USERS["admin"])]:
        seen: list[confluent_kafka.KafkaError] = []
        producer = confluent_kafka.Producer({**_ck_sasl(user, password), "error_cb": seen.append})
        try:
            deadline = time.monotonic() + 10
            while not seen and time.monotonic() < deadline:
                producer.poll(0.1)
        finally:
            producer.close()
        assert seen and seen[0].code() == confluent_kafka.KafkaError._AUTHENTICATION, (user, seen)
        assert "Invalid username or password" in seen[0].str()
