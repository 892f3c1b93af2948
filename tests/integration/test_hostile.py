"""Hostile clients against a real proxy in front of a real Kafka: what they get is what the broker
would give them, and a canary client on another connection never notices."""

from __future__ import annotations

import signal
import socket
import threading
import time
import urllib.request
from struct import pack

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.support.attack_frames import answered_then_closed, closed_without_answer
from tests.support.kafka_fixtures import needs_kraft
from tests.support.kafka_helpers import create_topic, unique_topic
from tests.support.proxy_fixtures import PROXY_HOST

PRODUCE = 0
DESCRIBE_QUORUM = 55


def raw_request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A request header v1 (client id "hostile") and `body`, framed."""
    payload = pack(">hhih", api_key, version, correlation_id, 7) + b"hostile" + body
    return pack(">i", len(payload)) + payload


class Canary:
    """A producer and a consumer on their own connections, checking every record arrives in order."""

    def __init__(self, bootstrap: str) -> None:
        self.topic = unique_topic("canary")
        create_topic(bootstrap, self.topic, partitions=1)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"}
        )
        self.consumer.subscribe([self.topic])
        self.sent = 0
        self.errors: list[str] = []

    def produce(self, count: int) -> None:
        def delivered(err, _msg) -> None:
            if err is not None:
                self.errors.append(str(err))

        for _ in range(count):
            self.producer.produce(self.topic, str(self.sent).encode(), on_delivery=delivered)
            self.sent += 1
        assert self.producer.flush(30) == 0

    def received_in_order(self, timeout: float = 30.0) -> list[int]:
        values: list[int] = []
        deadline = threading.Event()
        timer = threading.Timer(timeout, deadline.set)
        timer.start()
        try:
            while len(values) < self.sent and not deadline.is_set():
                message = self.consumer.poll(0.5)
                if message is not None and message.error() is None:
                    values.append(int(message.value()))
        finally:
            timer.cancel()
        return values

    def close(self) -> None:
        self.consumer.close()


@pytest.mark.matrix
@pytest.mark.parametrize("version", [3, 5, 8])
def test_a_header_only_produce_gets_the_brokers_close_and_a_canary_is_untouched(proxy, kafka, version: int) -> None:
    canary = Canary(proxy.bootstrap)
    try:
        canary.produce(50)
        frame = raw_request(PRODUCE, version, 1)
        broker_port = int(kafka.bootstrap.split(",")[0].rsplit(":", 1)[1])
        assert closed_without_answer((PROXY_HOST, broker_port), frame), "the broker itself closes on this frame"
        for port in (proxy.port, proxy.broker_port(1)):
            assert closed_without_answer((PROXY_HOST, port), frame), (
                f"the proxy on port {port} must close as the broker does"
            )
        canary.produce(50)
        assert canary.received_in_order() == list(range(100))
        assert canary.errors == []
    finally:
        canary.close()
    log = proxy.log_text()
    assert "Traceback" not in log and "never retrieved" not in log, log[-3000:]


@pytest.mark.matrix
@needs_kraft  # a ZooKeeper-mode broker has no quorum to describe
def test_describe_quorum_above_the_advertised_cap_is_closed_and_never_reaches_the_broker(proxy, kafka) -> None:
    # DescribeQuorum v2 lists controller addresses; the proxy offers v1 only. A v2 request with a
    # valid body (one topic "__cluster_metadata", partition 0; flexible, v2 header) is closed.
    body = b"\x02" + b"\x13__cluster_metadata" + b"\x02" + pack(">i", 0) + b"\x00\x00" + b"\x00"
    payload = pack(">hhih", DESCRIBE_QUORUM, 2, 5, 7) + b"hostile" + b"\x00" + body
    frame = pack(">i", len(payload)) + payload
    broker_port = int(kafka.bootstrap.split(",")[0].rsplit(":", 1)[1])
    assert not closed_without_answer((PROXY_HOST, broker_port), frame), (
        "the broker answers v2 (it leaks controller addresses)"
    )
    assert closed_without_answer((PROXY_HOST, proxy.port), frame)


@pytest.mark.matrix
def test_describe_configs_through_the_proxy_names_no_broker_address(proxy, kafka) -> None:
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    direct_admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    direct = direct_admin.describe_configs([resource])[resource].result(20)
    assert direct["listeners"].value, "the broker itself shows its listeners"
    proxy_admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    via_proxy = proxy_admin.describe_configs([resource])[resource].result(20)
    for name in ("listeners", "advertised.listeners", "controller.quorum.bootstrap.servers"):
        if name in via_proxy:
            assert via_proxy[name].value is None and via_proxy[name].is_sensitive, name
    broker_port = kafka.bootstrap.split(",")[0].rsplit(":", 1)[1]
    leaks = {name: entry.value for name, entry in via_proxy.items() if entry.value and broker_port in entry.value}
    assert leaks == {}
    assert via_proxy["log.dirs"].value == direct["log.dirs"].value, "configs without addresses pass untouched"


def test_sigterm_under_acks_all_load_answers_what_was_forwarded(proxy_factory, kafka) -> None:
    """Every record the client saw acknowledged is in the topic, and every record in the topic was
    acknowledged: no request is cut off between the broker writing it and the client hearing so."""
    proxy = proxy_factory(kafka.bootstrap, "")
    topic = unique_topic("sigterm")
    create_topic(kafka.bootstrap, topic, partitions=3)
    producer = Producer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "message.send.max.retries": 0,  # a retry would hide a lost answer behind a duplicate
            "linger.ms": 2,
            "message.timeout.ms": 8000,
        }
    )
    acknowledged: set[bytes] = set()
    failed: list[str] = []

    def delivered(err, msg) -> None:
        if err is None:
            acknowledged.add(msg.value())
        else:
            failed.append(str(err))

    sent = 0
    signalled_at: float | None = None
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up and (signalled_at is None or time.monotonic() < signalled_at + 1.0):
        try:
            for _ in range(50):
                producer.produce(topic, f"r-{sent}".encode(), on_delivery=delivered)
                sent += 1
        except BufferError:  # the client's queue is full: let it drain
            producer.poll(0.1)
        producer.poll(0)
        if signalled_at is None and len(acknowledged) >= 500:  # mid-load: answers are flowing
            proxy.process.send_signal(signal.SIGTERM)
            signalled_at = time.monotonic()
        time.sleep(0.005)
    assert signalled_at is not None, f"only {len(acknowledged)} records acknowledged in 60 s"
    producer.flush(15)
    assert proxy.process.wait(20) == 0
    consumer = Consumer(
        {"bootstrap.servers": kafka.bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"}
    )
    # Read everything the broker holds: up to the high watermarks (no retries, so one record each).
    total = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3))
    consumer.subscribe([topic])
    in_topic: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(in_topic) < total and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            in_topic.add(message.value())
    consumer.close()
    assert len(in_topic) == total, f"read {len(in_topic)} of the {total} records in the topic"
    assert acknowledged, "some records were acknowledged before the SIGTERM"
    assert acknowledged <= in_topic, f"{len(acknowledged - in_topic)} acknowledged records missing"
    assert in_topic <= acknowledged, f"{len(in_topic - acknowledged)} records written but never acknowledged"
    log = proxy.log_text()
    assert "shutting down" in log and "Traceback" not in log, log[-2000:]


API_VERSIONS = 18
SASL_HANDSHAKE = 17


def test_a_frame_over_sasl_server_max_receive_size_before_authentication_is_closed_as_the_broker_does(
    proxy_factory, kafka
) -> None:
    """On a SASL listener the broker reads every frame before authentication with a 512 KiB limit
    (its SaslServerAuthenticator): a bigger size prefix closes the connection without an answer, after
    the answers to the requests before it. The proxy learns the listener wants SASL by itself."""
    from tests.support.kafka_fixtures import KAFKA_SASL_BOOTSTRAP, KAFKA_SASL_PORT

    proxy = proxy_factory(KAFKA_SASL_BOOTSTRAP)
    # ApiVersions v0, then a SaslHandshake announcing 600 kB of which only the header is sent.
    big = pack(">i", 600_000) + pack(">hhih", SASL_HANDSHAKE, 1, 2, 7) + b"hostile"
    pipelined = raw_request(API_VERSIONS, 0, 1) + big
    assert answered_then_closed((PROXY_HOST, KAFKA_SASL_PORT), pipelined) == [1], (
        "the broker answers ApiVersions, then closes"
    )
    assert answered_then_closed((PROXY_HOST, proxy.port), pipelined) == [1], "the proxy must do the same"
    small_enough = pack(">i", 400_000) + pack(">hhih", SASL_HANDSHAKE, 1, 3, 7) + b"hostile"
    with socket.create_connection((PROXY_HOST, proxy.port), timeout=10) as sock:
        sock.sendall(small_enough)
        sock.settimeout(1.0)
        with pytest.raises(TimeoutError):  # still open, waiting for the rest of the frame
            sock.recv(1)
    metrics = urllib.request.urlopen(f"http://{PROXY_HOST}:{proxy.metrics_port}/metrics", timeout=10).read().decode()
    assert 'quotagate_frames_refused_total{reason="sasl_server_max_receive_size"} 1.0' in metrics
    assert "requires SASL" in proxy.log_text()


def test_an_infinite_quota_in_the_file_is_rejected_and_later_edits_still_apply(proxy_factory, kafka) -> None:
    """Issue 26: `producer_byte_rate = inf` in the running proxy's file killed its ConfigWatcher
    task ("Task exception was never retrieved"); no later edit, good ones included, was applied."""
    proxy = proxy_factory(kafka.bootstrap)
    config = proxy.config_path.read_text()

    def wait_for(text: str, count: int = 1) -> None:
        deadline = time.monotonic() + 15
        while proxy.log_text().count(text) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proxy.log_text().count(text) >= count, proxy.log_text()[-3000:]

    bad_values = ("producer_byte_rate = inf", "request_percentage = nan", "consumer_byte_rate = 1e400")
    for rejected, bad in enumerate(bad_values, start=1):
        proxy.config_path.write_text(config + f'\n[[quotas]]\nclient_id = "<default>"\n{bad}\n')
        wait_for("config reload rejected", count=rejected)
    assert "must be a finite number" in proxy.log_text()
    proxy.config_path.write_text(config + '\n[[quotas]]\nclient_id = "<default>"\nproducer_byte_rate = 123456\n')
    wait_for("config reloaded")
    with urllib.request.urlopen(f"http://{PROXY_HOST}:{proxy.metrics_port}/quotas", timeout=10) as response:
        assert b'"producer_byte_rate": 123456' in response.read()
    with urllib.request.urlopen(f"http://{PROXY_HOST}:{proxy.metrics_port}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert 'quotagate_config_reloads_total{result="rejected"} 3.0' in metrics, metrics
    assert "never retrieved" not in proxy.log_text() and "Traceback" not in proxy.log_text()
