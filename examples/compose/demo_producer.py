"""The demo producer of docker-compose.yml: produces through quotagate faster than its quota allows.

It asks for DEMO_BYTES_PER_SECOND (default 1 MiB/s) as client.id DEMO_CLIENT_ID; the compose
configuration gives that client-id 256 KiB/s, so the proxy throttles it: every 5 s it prints the
rate it got and the throttle time the proxy answered, and Grafana's Throttling row shows it.
After each acknowledged batch it touches DEMO_HEARTBEAT_FILE, which the compose healthcheck reads.
Runs in the quotagate image, whose kafka-python it uses.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kafka import KafkaProducer

BOOTSTRAP = os.environ.get("DEMO_BOOTSTRAP", "localhost:9192")
CLIENT_ID = os.environ.get("DEMO_CLIENT_ID", "demo-producer")
TOPIC = os.environ.get("DEMO_TOPIC", "demo")
BYTES_PER_SECOND = int(os.environ.get("DEMO_BYTES_PER_SECOND", str(1024 * 1024)))
HEARTBEAT_FILE = Path(os.environ.get("DEMO_HEARTBEAT_FILE", "/tmp/demo-producer.alive"))
RECORD_BYTES = 16 * 1024
REPORT_SECONDS = 5.0


def throttle_ms(producer: KafkaProducer) -> float:
    """The largest throttle_time_ms the proxy answered lately (kafka-python's throttle-time-max)."""
    maxima = [
        float(value or 0.0)
        for group in producer.metrics().values()
        for name, value in group.items()
        if name.endswith("throttle-time-max")
    ]
    return max(maxima, default=0.0)


def main() -> None:
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, client_id=CLIENT_ID, acks=1, linger_ms=5)
    payload = os.urandom(RECORD_BYTES)
    batch = max(1, BYTES_PER_SECOND // RECORD_BYTES // 10)  # ten batches a second when unthrottled
    print(f"demo producer: {CLIENT_ID} asks {BYTES_PER_SECOND} B/s to topic {TOPIC} via {BOOTSTRAP}", flush=True)
    started = report_at = time.monotonic()
    sent = reported = 0
    while True:
        for _ in range(batch):
            producer.send(TOPIC, payload)
        producer.flush()
        sent += batch * RECORD_BYTES
        HEARTBEAT_FILE.touch()
        now = time.monotonic()
        ahead = sent / BYTES_PER_SECOND - (now - started)  # pace at the asked rate; the quota slows it further
        if ahead > 0:
            time.sleep(ahead)
        if now - report_at >= REPORT_SECONDS:
            rate = (sent - reported) / (now - report_at)
            print(f"demo producer: {rate / 1024:.0f} KiB/s, throttle up to {throttle_ms(producer):.0f} ms", flush=True)
            report_at, reported = now, sent


if __name__ == "__main__":
    main()
