"""The rig's Kafka variants: which version and mode a cluster runs, where its jars are, and the
broker properties each mode gets (written, never started: tests/integration/test_kafka_rig.py
starts them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_rig import DEFAULT_VERSION, LIBS_DIR, VARIANT_ENV, Cluster, KafkaRigError, Variant, default_variant
from kafka_rig.cluster import _drop_controller_listener
from kafka_rig.jvm import VERSIONS_DIR, java_classpath, tool_arguments


def properties(cluster: Cluster, node_id: int = 1) -> dict[str, str]:
    node = cluster.node(node_id)
    cluster._write_properties(node)
    lines = node.properties.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@pytest.mark.parametrize(
    ("text", "version", "zookeeper"),
    [("4.4.0", "4.4.0", False), ("3.9.1-zk", "3.9.1", True), ("3.9.1", "3.9.1", False), (" 4.0.2 ", "4.0.2", False)],
)
def test_a_variant_is_written_as_it_is_read(text: str, version: str, zookeeper: bool) -> None:
    variant = Variant.parse(text)
    assert (variant.version, variant.zookeeper) == (version, zookeeper)
    assert Variant.parse(str(variant)) == variant


@pytest.mark.parametrize("text", ["4.4.0-zk", "4.4", "latest", "3.9.1-zk-zk"])
def test_variants_kafka_cannot_run_are_refused_naming_them(text: str) -> None:
    with pytest.raises(KafkaRigError) as refused:
        Variant.parse(text)
    assert text.removesuffix("-zk") in str(refused.value)


def test_the_default_version_keeps_its_jars_where_they_were_and_others_get_a_folder_each() -> None:
    assert Variant().version == DEFAULT_VERSION
    assert Variant().libs_dir == LIBS_DIR
    assert Variant.parse("4.4.0").libs_dir == VERSIONS_DIR / "4.4.0" / "libs"
    assert Variant.parse("3.9.1-zk").libs_dir == Variant.parse("3.9.1").libs_dir
    assert java_classpath(Variant.parse("4.4.0")) == str(VERSIONS_DIR / "4.4.0" / "libs" / "*")


def test_the_environment_chooses_the_default_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIANT_ENV, "3.9.1-zk")
    assert default_variant() == Variant("3.9.1", zookeeper=True)
    monkeypatch.delenv(VARIANT_ENV)
    assert default_variant() == Variant()


def test_a_kraft_node_is_a_combined_broker_and_controller(tmp_path: Path) -> None:
    cluster = Cluster.create("kraft", 1, 41000, workdir=tmp_path, variant=Variant.parse("3.9.1"))
    props = properties(cluster)
    assert props["process.roles"] == "broker,controller"
    assert "CONTROLLER://127.0.0.1:41100" in props["listeners"]
    assert "zookeeper.connect" not in props


def test_a_zookeeper_node_is_a_broker_of_the_clusters_zookeeper(tmp_path: Path) -> None:
    cluster = Cluster.create("zk", 2, 41000, workdir=tmp_path, variant=Variant.parse("3.9.1-zk"), sasl_users={"a": "b"})
    props = properties(cluster, 2)
    assert props["broker.id"] == "2"
    assert props["zookeeper.connect"] == "127.0.0.1:41100" == cluster.zookeeper_connect
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:41001,SASL_PLAINTEXT://127.0.0.1:41401"
    assert not {"process.roles", "node.id", "controller.listener.names"} & set(props)


def test_kraft_listener_overrides_lose_their_controller_listener_in_zookeeper_mode() -> None:
    props = {
        "listeners": "PLAINTEXT://h:1,CONTROLLER://h:2,SSL://h:3",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL",
    }
    _drop_controller_listener(props)
    assert props == {
        "listeners": "PLAINTEXT://h:1,SSL://h:3",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
    }


def test_a_saved_cluster_keeps_its_kafka(tmp_path: Path) -> None:
    Cluster.create("kept", 1, 41000, workdir=tmp_path, variant=Variant.parse("4.4.0"), sasl_users={"a": "b"})
    assert Cluster.attach("kept", tmp_path).variant == Variant.parse("4.4.0")
    with pytest.raises(KafkaRigError, match="was created as"):
        Cluster.create("kept", 1, 41000, workdir=tmp_path, variant=Variant.parse("3.9.1-zk"))


def test_a_tool_option_kip_1147_renamed_is_spelled_as_the_older_versions_spell_it() -> None:
    args = ["--topic", "t", "--command-property", "acks=all", "--command-config", "c.properties"]
    perf = "org.apache.kafka.tools.ProducerPerformance"
    assert tool_arguments(perf, args, Variant.parse("4.2.0")) == args
    assert tool_arguments(perf, args, Variant.parse("4.0.2")) == [
        "--topic", "t", "--producer-props", "acks=all", "--producer.config", "c.properties"
    ]  # fmt: skip
    assert tool_arguments("kafka.tools.ConsoleProducer", args, Variant.parse("3.9.1-zk"))[2] == "--producer-property"
    assert tool_arguments("kafka.admin.ConfigCommand", args, Variant.parse("3.9.1")) == args  # it always had them
