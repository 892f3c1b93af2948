"""docker-compose.yml's Kafka nodes, started from their environment the way the apache/kafka image does.

The image writes each KAFKA_* variable as a server.properties entry (KAFKA_NODE_ID -> node.id: drop
the prefix, lower case, "_" -> ".", "__" -> "-", "___" -> "_"), formats the log dir with CLUSTER_ID
and starts the node. This does the same with the rig's jars (the same Kafka version) on loopback: the
host names kafka-N and the ports 9092/9093 become free local ports, log.dirs a temporary folder. So
the compose file's KRaft settings are run, not only parsed: kafka-1 alone is a cluster (the default
profile), kafka-2 and kafka-3 join it as brokers (the `cluster` profile), and quotagate with the
compose quotas serves all three. No container is started; the image's own scripts are not run.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from kafka_rig import BROKER_MAIN, DEFAULT_HEAP_OPTS, STORAGE_MAIN, metadata_brokers, run_tool
from kafka_rig.jvm import _jvm_cmd
from tests.support.compose import compose_config, kafka_services, quotas_toml
from tests.support.proxy_fixtures import free_port_block, start_proxy


def image_property_name(variable: str) -> str:
    """The server.properties key the apache/kafka image makes of a KAFKA_* variable."""
    name = variable.removeprefix("KAFKA_").lower()
    return name.replace("___", "\0").replace("__", "-").replace("_", ".").replace("\0", "_")


def test_image_property_names() -> None:
    assert image_property_name("KAFKA_NODE_ID") == "node.id"
    assert image_property_name("KAFKA_CONTROLLER_QUORUM_VOTERS") == "controller.quorum.voters"
    assert image_property_name("KAFKA_A__B___C") == "a-b_c"


class LocalNodes:
    """Compose Kafka services as local JVMs: node N's client port is first + N, the controller's first."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.first_port = free_port_block(5)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def client_port(self, node_id: int) -> int:
        return self.first_port + node_id

    def local(self, value: str, node_id: int) -> str:
        controller = f"127.0.0.1:{self.first_port}"
        value = re.sub(r"kafka-(\d):9092", lambda m: f"127.0.0.1:{self.client_port(int(m[1]))}", value)
        value = value.replace("kafka-1:9093", controller).replace("://:9093", f"://{controller}")
        value = value.replace("://:9092", f"://127.0.0.1:{self.client_port(node_id)}")
        assert not re.search(r"kafka-\d|:909[23]\b", value), f"not remapped: {value}"
        return value

    def start(self, service: dict) -> int:
        env = {key: str(value) for key, value in service["environment"].items()}
        node_id = int(env["KAFKA_NODE_ID"])
        node_dir = self.workdir / f"node{node_id}"
        node_dir.mkdir()
        properties = {
            image_property_name(key): self.local(value, node_id)
            for key, value in env.items()
            if key.startswith("KAFKA_")
        }
        properties["log.dirs"] = str(node_dir / "data")
        path = node_dir / "server.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
        run_tool(STORAGE_MAIN, "format", "--cluster-id", env["CLUSTER_ID"], "--config", str(path), "--ignore-formatted")
        with (node_dir / "out.log").open("wb") as log:
            self.processes[node_id] = subprocess.Popen(
                _jvm_cmd(BROKER_MAIN, [str(path)], DEFAULT_HEAP_OPTS, node_dir),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return node_id

    def wait_for_brokers(self, expected: list[int], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        seen: list[int] = []
        while time.monotonic() < deadline:
            for node_id, process in self.processes.items():
                if process.poll() is not None:
                    log = (self.workdir / f"node{node_id}" / "out.log").read_text(errors="replace")
                    pytest.fail(f"node {node_id} exited with {process.returncode}:\n{log[-4000:]}")
            with contextlib.suppress(OSError):
                seen, _ = metadata_brokers(self.client_port(1))
                if seen == expected:
                    return
            time.sleep(1)
        pytest.fail(f"brokers {expected} not all registered after {timeout} s: saw {seen}")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def local_nodes(tmp_path: Path) -> Iterator[LocalNodes]:
    nodes = LocalNodes(tmp_path)
    yield nodes
    nodes.stop()


@pytest.mark.long_only
@pytest.mark.timeout(300)
def test_compose_kafka_nodes_form_one_then_three_brokers_behind_quotagate(local_nodes: LocalNodes, tmp_path) -> None:
    compose = compose_config()
    brokers = kafka_services(compose)
    local_nodes.start(brokers["kafka-1"])
    local_nodes.wait_for_brokers([1])  # the default profile: kafka-1 alone
    local_nodes.start(brokers["kafka-2"])
    local_nodes.start(brokers["kafka-3"])
    local_nodes.wait_for_brokers([1, 2, 3])  # --profile cluster: the two brokers joined kafka-1's quorum

    proxy = start_proxy(f"127.0.0.1:{local_nodes.client_port(1)}", tmp_path, extra_toml=quotas_toml(compose))
    try:
        admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="compose-env-test")
        try:
            seen = sorted((b["broker_id"], b["port"]) for b in admin.describe_cluster()["brokers"])
        finally:
            admin.close()
    finally:
        proxy.stop()
    assert seen == [(node, proxy.broker_port(node)) for node in (1, 2, 3)]
