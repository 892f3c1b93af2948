#!/usr/bin/env python3
"""`make demo` (`python -m scripts.demo` from the repository root): a local Kafka, quotagate in front
of it, traffic that shows a quota working.

Starts its own single-broker Kafka (cluster "demo", port 19092) so it never disturbs a Kafka started
with `make kafka-up`, runs quotagate as a subprocess, sets a producer quota for one client-id with
Kafka's own kafka-configs.sh pointed at the proxy, runs two producers side by side (one under the
quota, one free), consumes everything back, prints the achieved rates and what the proxy saw, and
stops everything it started.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from kafka_rig import fresh_cluster, run_tool

REPO_ROOT = Path(__file__).resolve().parents[1]

KAFKA_PORT = 19092
PROXY_PORT = 19392
METRICS_PORT = 19390
TOPIC = "demo-events"
RECORD_SIZE = 1000
QUOTA = 500_000  # bytes/s for client-id "limited"
SECONDS = 10.0
TENANT = "demo-team"
RATES = REPO_ROOT / "examples" / "chargeback-rates.toml"


def start_proxy(workdir: Path) -> subprocess.Popen[bytes]:
    config = workdir / "quotagate.toml"
    config.write_text(
        # One window of burst, so the achieved rate shows the quota rather than the burst. No quota in
        # the file: kafka-configs.sh sets it. Without SASL every client is ANONYMOUS, so listing it lets
        # anyone alter quotas: fine for a local demo, never for a shared cluster.
        f'quota_window_num = 1\n[proxy]\nbootstrap_servers = ["127.0.0.1:{KAFKA_PORT}"]\nport = {PROXY_PORT}\n'
        f'[metrics]\nport = {METRICS_PORT}\n[admin]\nalter_principals = ["ANONYMOUS"]\n'
        # v2 usage aggregates (Parquet), for the pipeline run that ends the demo
        f'[usage]\nenabled = true\ndirectory = "{workdir / "usage"}"\n'
        # Both producers in one tenant, with no quota of its own: the records name it, and the
        # pipeline's chargeback bills it.
        f'[[tenants]]\nname = "{TENANT}"\nclient_ids = ["limited", "free"]\n'
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


def produce_for(bootstrap: str, client_id: str, rates: dict[str, float]) -> None:
    """Produces as fast as the client may for SECONDS; records the achieved rate after a 1 s warm-up."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1, linger_ms=5)
    value = os.urandom(RECORD_SIZE)
    acked: list[float] = []
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < SECONDS:
        # At most 500 records waiting: kafka-python 3 has no memory bound, and the quota holds them.
        if sent - len(acked) > 500:
            time.sleep(0.005)
            continue
        producer.send(TOPIC, value=value).add_callback(lambda _m: acked.append(time.monotonic()))
        sent += 1
    producer.flush()
    producer.close()
    window = [t for t in acked if started + 1 <= t < started + SECONDS]
    rates[client_id] = len(window) * RECORD_SIZE / (SECONDS - 1)
    rates[f"{client_id}_records"] = len(acked)


def run_pipeline(workdir: Path) -> bool:
    """The usage the demo recorded, through the whole pipeline on local Spark; prints the quota the
    records say the limited producer had (set with kafka-configs.sh: in no file), what it did at it,
    the recommendation, and where the report is."""
    print("== the usage pipeline on Spark (local[2]) over the records the proxy wrote")
    started = time.monotonic()
    work = workdir / "pipeline"
    # No --config: the records name the quota in force (set with kafka-configs.sh) and the windows.
    inputs = ["--input", str(workdir / "usage"), "--work", str(work), "--rates", str(RATES)]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "quotagate",
            "--log-level",
            "WARNING",
            "pipeline",
            "all",
            "--master",
            "local[2]",
            *inputs,
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(done.stdout + done.stderr[-3000:])
        return False
    toml = (work / "recommendations" / "quotas.toml").read_text()
    limited = next((block for block in toml.split("\n\n") if 'client_id = "limited"' in block), "")
    import pandas as pd

    found = pd.read_parquet(work / "recommendations" / "recommendations.parquet")
    rows = found[(found["client_id"] == "limited") & (found["quota_key"] == "producer_byte_rate")]
    current = float(rows["current"].iloc[0]) if len(rows) else float("nan")
    print(f"   done in {time.monotonic() - started:.0f} s")
    if len(rows):
        row = rows.iloc[0]
        print(
            f"   the limited producer's current quota, from the usage records: {current:,.0f} B/s "
            f"({row['current_source']}); at it the replay holds it {row['current_throttled_time_ms'] / 1000:.1f} s "
            f"({row['current_seconds_throttled']:.0f} s throttled), the proxy recorded "
            f"{row['current_recorded_held_ms'] / 1000:.1f} s ({row['current_recorded_seconds_throttled']:.0f} s)"
        )
    print("   recommended for it (it ran at its quota, so this is a floor):")
    print("   " + limited.strip().replace("\n", "\n   "))
    bill = pd.read_csv(work / "chargeback" / "chargeback.csv")
    print(f"   chargeback at the rates of {RATES.relative_to(REPO_ROOT)}:")
    for row in bill.itertuples():
        tenant = row.tenant if isinstance(row.tenant, str) else "no tenant"
        print(
            f"   {tenant} / {row.client_id}: {row.bytes_in_share:.1%} of the bytes in, "
            f"{row.cost_total:.6f} {row.currency}"
        )
    print(f"   report: {work / 'report.html'}")
    billed = set(bill.loc[bill["tenant"] == TENANT, "client_id"])
    return bool(limited) and current == QUOTA and {"limited", "free"} <= billed


def main() -> int:
    from kafka import KafkaConsumer
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

        command = ["--bootstrap-server", bootstrap, "--entity-type", "clients", "--entity-name", "limited"]
        print(f"== kafka-configs.sh {' '.join(command)} --alter --add-config producer_byte_rate={QUOTA}")
        print(
            "  ", run_tool("configs", *command, "--alter", "--add-config", f"producer_byte_rate={QUOTA}").stdout.strip()
        )
        print("  ", run_tool("configs", *command, "--describe").stdout.strip(), "(the proxy's quota, not the broker's)")

        print(
            f"== two producers side by side for {SECONDS:.0f} s; client-id 'limited' has producer_byte_rate = {QUOTA:,}"
        )
        rates: dict[str, float] = {}
        threads = [
            threading.Thread(target=produce_for, args=(bootstrap, client_id, rates))
            for client_id in ("limited", "free")
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for client_id in ("limited", "free"):
            note = f" ({rates[client_id] / QUOTA:.2f} x its quota)" if client_id == "limited" else " (no quota)"
            print(f"   {client_id:>8}: {rates[client_id] / 1e6:6.2f} MB/s{note}")

        sent = rates["limited_records"] + rates["free_records"]
        print(f"== consuming all {sent:,.0f} records back through the proxy (consumer group)")
        consumer = KafkaConsumer(
            TOPIC, bootstrap_servers=bootstrap, group_id="demo", auto_offset_reset="earliest", consumer_timeout_ms=10000
        )
        started = time.monotonic()
        received = 0
        for _ in consumer:
            received += 1
            if received == sent:
                break
        consumer.close()
        print(f"   {received:,} of {sent:,.0f} records back in {time.monotonic() - started:.1f} s")

        from quotagate.protocol.apis import api_name

        counts = proxy_requests_by_api()
        print("== requests the proxy saw, by API (it answered the quota ones itself):")
        for api_key, count in sorted(counts.items(), key=lambda kv: -kv[1]):
            print(f"   {api_name(int(api_key)):>20}: {count:,.0f}")
        ok = received == sent and abs(rates["limited"] / QUOTA - 1) < 0.15 and rates["free"] > 2 * QUOTA
        proxy.terminate()  # SIGTERM: the proxy flushes its usage records and closes their files
        proxy.wait(10)
        proxy = None
        ok = run_pipeline(workdir) and ok
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
