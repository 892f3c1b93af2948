"""No client ever learns or uses a broker address: every connection to a broker comes from the proxy."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from kafka_rig import java_classpath
from tests.support.kafka_helpers import create_topic, established_connections_to, unique_topic, wait_until


def broker_port(cluster) -> int:
    return int(cluster.bootstrap.split(",")[0].rsplit(":", 1)[1])


def test_clients_only_see_proxy_addresses_in_metadata(proxy, kafka) -> None:
    metadata = AdminClient({"bootstrap.servers": proxy.bootstrap}).list_topics(timeout=10)
    assert {(b.host, b.port) for b in metadata.brokers.values()} == {("127.0.0.1", proxy.broker_port(1))}
    assert broker_port(kafka) not in {b.port for b in metadata.brokers.values()}


@pytest.mark.java
def test_the_clients_reach_the_broker_port_only_through_the_proxy(proxy, kafka) -> None:
    """Run Python and Java clients at once and look at who holds sockets to the broker's port."""
    topic = unique_topic("iso")
    create_topic(proxy.bootstrap, topic, partitions=2)
    stop = threading.Event()

    def python_clients() -> None:
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 5})
        consumer = Consumer(
            {"bootstrap.servers": proxy.bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"}
        )
        consumer.subscribe([topic])
        while not stop.is_set():
            try:
                producer.produce(topic, b"x" * 100)
            except BufferError:  # its queue full on a loaded machine (seen in make test): wait, not die
                producer.poll(0.1)
            producer.poll(0)
            consumer.poll(0.05)
        producer.flush(10)
        consumer.close()

    thread = threading.Thread(target=python_clients, daemon=True)
    thread.start()
    java = subprocess.Popen(
        [
            "java", "-Xmx256m", "-cp", java_classpath(), "org.apache.kafka.tools.ProducerPerformance",
            "--topic", topic, "--num-records", "200000", "--record-size", "100", "--throughput", "5000",
            "--command-property", f"bootstrap.servers={proxy.bootstrap}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    samples = []
    try:
        # Sample once both clients are producing through the proxy's broker port (the JVM takes
        # seconds to start, more on a loaded machine): waits on that, not on a fixed time.
        wait_until(
            lambda: {java.pid, os.getpid()} <= {pid for _, pid in established_connections_to(proxy.broker_port(1))},
            60,
            "the Java and the Python clients both connected to the proxy's broker port",
            interval=0.2,
        )
        assert java.poll() is None, f"the Java producer exited with {java.returncode}"
        for _ in range(10):
            samples.append(established_connections_to(broker_port(kafka)))
            time.sleep(0.3)
    finally:
        stop.set()
        java.terminate()
        java.wait(15)
        thread.join(15)
    owners = {pid for sample in samples for _, pid in sample}
    assert owners, "the proxy should hold connections to the broker while clients run"
    # This test's clients are the Java producer and this process (the Python clients' thread). Other
    # processes may be connected too: the session broker is shared with the other xdist worker's tests.
    clients = {java.pid, os.getpid()}
    assert not owners & clients, f"connections to the broker from this test's clients, pids {owners & clients}"
    assert proxy.pid in owners
