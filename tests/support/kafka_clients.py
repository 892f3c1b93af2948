"""Real clients producing in threads for the quota tests, what they had acknowledged and when, and the
quota configurations those tests write."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from confluent_kafka import Producer
from kafka import KafkaProducer

from tests.support.kafka_fixtures import SASL_USERS

QUOTA = 200_000  # bytes/s
RECORD = 1000  # bytes of value per record
WINDOWS = "quota_window_num = 1\n"


def librdkafka_sasl_plain(user: str) -> dict[str, str]:
    """librdkafka's settings for the session broker's SASL/PLAIN user `user` (through a proxy too)."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": SASL_USERS[user],
    }


def quota_config(*entries: str) -> str:
    return "".join(f"\n[[quotas]]\n{entry}\n" for entry in entries)


def rate_between(events: list[tuple[float, int]], start: float, end: float) -> float:
    """Bytes per second of the (time, bytes) events that fall in [start, end)."""
    return sum(size for at, size in events if start <= at < end) / (end - start)


class Acked:
    """Thread-safe (time, bytes) log of acknowledged records."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int]] = []
        self.lock = threading.Lock()

    def add(self, size: int) -> None:
        with self.lock:
            self.events.append((time.monotonic(), size))


def kafka_python_producer_loop(
    bootstrap: str, topic: str, client_id: str, seconds: float, acked: Acked, extra: dict | None = None
) -> None:
    """kafka-python ignores throttle_time_ms: only the proxy's mute can hold it back."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1, linger_ms=5, **(extra or {}))
    value = os.urandom(RECORD)
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        # At most 300 records waiting (kafka-python 3 has no memory bound): keeps the final flush short.
        if sent - len(acked.events) > 300:
            time.sleep(0.005)
            continue
        producer.send(topic, value=value).add_callback(lambda _metadata: acked.add(RECORD))
        sent += 1
    producer.close(timeout=30)


class Produced:
    """Records handed to a producer (sent), and those whose delivery report was an error (failed)."""

    def __init__(self) -> None:
        self.sent = 0
        self.failed = 0


def confluent_producer_loop(
    bootstrap: str,
    topic: str,
    client_id: str,
    seconds: float,
    acked: Acked,
    extra: dict | None = None,
    produced: Produced | None = None,
) -> None:
    # Java-sized batches (librdkafka's default is 1 MB: at 200 kB/s each answer would carry a 5 s
    # throttle and the rate would arrive in lumps) and a bounded queue, so the final flush is short.
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "batch.size": 16384,
            "queue.buffering.max.kbytes": 256,
            **(extra or {}),
        }
    )
    value = os.urandom(RECORD)
    deadline = time.monotonic() + seconds

    counts = produced or Produced()  # touched by this thread only: poll() runs the callbacks here

    def delivered(err, _msg) -> None:
        if err is None:
            acked.add(RECORD)
        else:
            counts.failed += 1

    while time.monotonic() < deadline:
        try:
            producer.produce(topic, value=value, on_delivery=delivered)
            counts.sent += 1
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.flush(30)


def run_threads(*targets: Callable[[], None]) -> None:
    threads = [threading.Thread(target=target, daemon=True) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
