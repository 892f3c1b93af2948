"""With 3 brokers behind the proxy, a broker is stopped and restarted while clients keep going."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer

from tests.support.kafka_helpers import create_topic, unique_topic, wait_until

pytestmark = pytest.mark.cluster


class ContinuousProducer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60000,
            }
        )
        self.acked: list[tuple[float, bytes]] = []
        self.failed: list[str] = []
        self.stopping = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.append((time.monotonic(), msg.value()))
        else:
            self.failed.append(str(err))

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            self.producer.produce(self.topic, value=f"v{i}".encode(), on_delivery=self._delivered)
            self.producer.poll(0.002)
            i += 1
        self.producer.flush(60)


class ContinuousConsumer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": unique_topic("fo"), "auto.offset.reset": "earliest"}
        )
        self.consumer.subscribe([topic])
        self.received: list[tuple[float, bytes]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for msg in self.consumer.consume(1000, timeout=0.2):
                if msg.error() is None:
                    self.received.append((time.monotonic(), msg.value()))
        self.consumer.close()


def test_clients_ride_through_a_broker_restart_without_losing_acknowledged_data(
    cluster_proxy,
    kafka_cluster,
) -> None:
    topic = unique_topic("failover")
    create_topic(cluster_proxy.bootstrap, topic, partitions=6, replication=3, **{"min.insync.replicas": "2"})
    producer = ContinuousProducer(cluster_proxy.bootstrap, topic)
    consumer = ContinuousConsumer(cluster_proxy.bootstrap, topic)
    producer.start()
    consumer.start()

    # Each step waits on what it needs (records acknowledged and read after it) rather than a fixed
    # time: fast on a quiet machine, and never too short on a loaded one.
    def flowing_since(moment: float) -> bool:
        return any(t > moment for t, _ in producer.acked[-50:]) and any(t > moment for t, _ in consumer.received[-50:])

    try:
        wait_until(lambda: flowing_since(0), 60, "records acknowledged and read before the stop")
        stopped_at = time.monotonic()
        kafka_cluster.stop_node(2)
        # Broker 2's partitions have new leaders once records are acknowledged and read again, from
        # a second after the stop (when the assertions below start counting); 3 s down at least.
        wait_until(lambda: flowing_since(stopped_at + 1), 60, "records acknowledged and read with broker 2 down")
        time.sleep(max(0.0, stopped_at + 3 - time.monotonic()))
        restarted_at = time.monotonic()
        kafka_cluster.start_node(2)
        back_at = time.monotonic()
        wait_until(
            lambda: flowing_since(back_at) and len(producer.acked) > 1000,
            60,
            "records acknowledged and read after broker 2 is back, over 1000 in all",
        )
    finally:
        producer.stopping.set()
        producer.join(90)
    acked = {value for _, value in producer.acked}
    deadline = time.monotonic() + 60
    while not acked <= {value for _, value in consumer.received} and time.monotonic() < deadline:
        time.sleep(0.5)
    consumer.stopping.set()
    consumer.join(30)
    received = {value for _, value in consumer.received}

    assert producer.failed == []
    assert len(acked) > 1000
    assert acked - received == set(), f"{len(acked - received)} acknowledged records never arrived"
    acked_while_down = [t for t, _ in producer.acked if stopped_at + 1 < t < restarted_at]
    read_while_down = [t for t, _ in consumer.received if stopped_at + 1 < t < restarted_at]
    assert acked_while_down, "the producer must keep producing while broker 2 is down"
    assert read_while_down, "the consumer must keep consuming while broker 2 is down"


def test_a_quota_holds_for_the_cluster_not_per_broker(proxy_factory, kafka_cluster) -> None:
    """One producer writes to partitions led by all 3 brokers; together they get one quota, not 3."""
    from tests.support.kafka_clients import WINDOWS, Acked, confluent_producer_loop, quota_config, rate_between

    quota = 300_000
    proxy = proxy_factory(
        kafka_cluster.bootstrap, WINDOWS + quota_config(f'client_id = "spread"\nproducer_byte_rate = {quota}')
    )
    topic = unique_topic("spread")
    create_topic(proxy.bootstrap, topic, partitions=6, replication=1)
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique_topic("g")})
    leaders = {p.leader for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions.values()}
    consumer.close()
    acked = Acked()
    started = time.monotonic()
    confluent_producer_loop(proxy.bootstrap, topic, "spread", 16.0, acked)
    rate = rate_between(acked.events, started + 3, started + 16)
    print(f"spread over brokers {sorted(leaders)}: {rate / quota:.3f}x of the quota")
    assert leaders == {1, 2, 3}, "the partitions must be led by all three brokers"
    assert rate == pytest.approx(quota, rel=0.10), f"{rate:.0f} B/s over 3 brokers"
