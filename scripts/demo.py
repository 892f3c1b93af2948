#!/usr/bin/env python3
"""`make demo`: a local Kafka, quotagate in front of it, and traffic through it, then a clean-up.

Starts its own single-broker Kafka (cluster "demo", port 19092) so it never disturbs a Kafka started
with `make kafka-up`, runs quotagate as a subprocess, produces and consumes through it with two
different clients, prints what happened, and stops everything it started.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "scripts"))

from kafka_rig import fresh_cluster  # noqa: E402

KAFKA_PORT = 19092
PROXY_PORT = 19392
METRICS_PORT = 19390
TOPIC = "demo-events"
RECORDS = 20000
RECORD_SIZE = 512


def start_proxy(workdir: Path) -> subprocess.Popen[bytes]:
    config = workdir / "quotagate.toml"
    config.write_text(
        f'[proxy]\nbootstrap_servers = ["127.0.0.1:{KAFKA_PORT}"]\nport = {PROXY_PORT}\n'
        f"[metrics]\nport = {METRICS_PORT}\n"
    )
    log = (workdir / "quotagate.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "quotagate", "run", "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    for _ in range(100):
        if "quotagate ready" in (workdir / "quotagate.log").read_text():
            return process
        if process.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit("quotagate did not start:\n" + (workdir / "quotagate.log").read_text())


def proxy_requests_by_api() -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5).read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("quotagate_requests_total{"):
            api_key = line.split('api_key="')[1].split('"')[0]
            counts[api_key] = float(line.rsplit(" ", 1)[1])
    return counts


def main() -> int:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    print(f"== starting a local Kafka (KRaft, 1 broker) on 127.0.0.1:{KAFKA_PORT}")
    started = time.monotonic()
    cluster = fresh_cluster("demo", 1, KAFKA_PORT, controller_base_port=KAFKA_PORT + 1)
    print(f"   ready in {time.monotonic() - started:.1f} s")
    workdir = Path(tempfile.mkdtemp(prefix="quotagate-demo-"))
    proxy = None
    try:
        print(f"== starting quotagate: clients use 127.0.0.1:{PROXY_PORT}, metrics on :{METRICS_PORT}")
        proxy = start_proxy(workdir)
        bootstrap = f"127.0.0.1:{PROXY_PORT}"

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        brokers = admin.describe_cluster()["brokers"]
        print(
            "   brokers as clients see them:",
            ", ".join(f"node {b['broker_id']} at {b['host']}:{b['port']}" for b in brokers),
        )
        admin.create_topics([NewTopic(TOPIC, 3, 1)])
        admin.close()

        print(f"== producing {RECORDS} records of {RECORD_SIZE} B through the proxy (kafka-python)")
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        value = b"x" * RECORD_SIZE
        started = time.monotonic()
        for i in range(RECORDS):
            producer.send(TOPIC, key=str(i % 10).encode(), value=value)
        producer.flush()
        elapsed = time.monotonic() - started
        producer.close()
        print(f"   {RECORDS / elapsed:,.0f} records/s, {RECORDS * RECORD_SIZE / elapsed / 1e6:.1f} MB/s")

        print("== consuming them back through the proxy (kafka-python, consumer group)")
        consumer = KafkaConsumer(
            TOPIC, bootstrap_servers=bootstrap, group_id="demo", auto_offset_reset="earliest", consumer_timeout_ms=10000
        )
        started = time.monotonic()
        received = 0
        for _ in consumer:
            received += 1
            if received == RECORDS:
                break
        elapsed = time.monotonic() - started
        consumer.close()
        print(f"   {received} of {RECORDS} records back in {elapsed:.1f} s")

        from quotagate.protocol.apis import api_name

        counts = proxy_requests_by_api()
        print("== requests the proxy forwarded, by API:")
        for api_key, count in sorted(counts.items(), key=lambda kv: -kv[1]):
            print(f"   {api_name(int(api_key)):>16}: {count:,.0f}")
        ok = received == RECORDS
        print("== demo", "passed" if ok else "FAILED")
        return 0 if ok else 1
    finally:
        print("== cleaning up")
        if proxy is not None:
            proxy.terminate()
            proxy.wait(10)
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
