"""Observability through a real proxy: usage records in files and in Kafka, and a real Prometheus
scraping the proxy while one entity is throttled and another is not (issue 5)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from tests.support.kafka_clients import WINDOWS, Acked, confluent_producer_loop, quota_config, run_threads
from tests.support.kafka_helpers import create_topic, produce_usage_records, unique_topic
from tests.support.proxy_fixtures import free_port_block


def read_usage(directory: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(directory.rglob("*.jsonl")) for line in path.read_text().splitlines()]


def test_every_request_leaves_a_usage_record_in_hourly_jsonl_files(proxy_factory, kafka, tmp_path: Path) -> None:
    usage_dir = tmp_path / "usage"
    proxy = proxy_factory(
        kafka.bootstrap,
        WINDOWS
        + quota_config('client_id = "usage-app"\nproducer_byte_rate = 50000')
        + f'\n[usage]\nenabled = true\nsink = "jsonl"\nrecords = "request"\ndirectory = "{usage_dir}"\n'
        + "flush_interval_seconds = 0.2\n",
    )
    topic = unique_topic("usage")
    create_topic(proxy.bootstrap, topic, partitions=1)
    confluent_producer_loop(proxy.bootstrap, topic, "usage-app", 3.0, Acked())
    proxy.stop()  # SIGTERM: the proxy flushes what it holds before it exits
    records = read_usage(usage_dir)
    produces = [r for r in records if r["api_key"] == 0 and r["client_id"] == "usage-app"]
    assert produces, f"no produce records among {len(records)}"
    assert all(r["v"] == 1 and r["topics"] == [topic] and r["bytes_in"] > 0 for r in produces)
    assert {r["decision"] for r in produces} >= {"throttled"}, "a 50 kB/s quota must have throttled some"
    assert sum(r["throttle_ms"] for r in produces) > 0
    assert all(Path(p).parent.name.startswith("hour=") for p in map(str, usage_dir.rglob("*.jsonl")))
    print(
        f"{len(records)} usage records, {len(produces)} produce, decisions {sorted({r['decision'] for r in records})}"
    )


def test_usage_records_can_go_to_a_kafka_topic(proxy_factory, kafka) -> None:
    usage_topic = unique_topic("quotagate-usage")
    create_topic(kafka.bootstrap, usage_topic, partitions=1)
    proxy = proxy_factory(
        kafka.bootstrap,
        f'[usage]\nenabled = true\nsink = "kafka"\nrecords = "request"\nkafka_topic = "{usage_topic}"\n'
        f'kafka_bootstrap_servers = ["{kafka.bootstrap}"]\nflush_interval_seconds = 0.2\n',
    )
    topic = unique_topic("traffic")
    create_topic(proxy.bootstrap, topic, partitions=1)
    confluent_producer_loop(proxy.bootstrap, topic, "to-kafka", 1.5, Acked())
    records = produce_usage_records(kafka.bootstrap, usage_topic, "to-kafka")
    produces = [r for r in records if r["client_id"] == "to-kafka" and r["api_key"] == 0]
    assert produces and all(r["v"] == 1 and r["topics"] == [topic] for r in produces)


def prometheus_query(port: int, query: str) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    result = json.loads(urllib.request.urlopen(url, timeout=5).read())["data"]["result"]
    return {item["metric"].get("client_id", ""): float(item["value"][1]) for item in result}


def test_a_real_prometheus_sees_the_throttle_rise_for_the_throttled_entity_only(
    proxy_factory, kafka, tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed: run `make prometheus-tools` (make test does)"
    proxy = proxy_factory(
        kafka.bootstrap, WINDOWS + quota_config('client_id = "throttled"\nproducer_byte_rate = 100000')
    )
    prometheus_port = free_port_block(1)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: quotagate\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{proxy.metrics_port}']\n"
    )
    server = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        topic = unique_topic("prom")
        create_topic(proxy.bootstrap, topic, partitions=1)
        run_threads(
            lambda: confluent_producer_loop(proxy.bootstrap, topic, "throttled", 10.0, Acked()),
            lambda: confluent_producer_loop(proxy.bootstrap, topic, "free", 10.0, Acked()),
        )
        # Prometheus scrapes every second: wait for its first scrape after the run (the final
        # counters) instead of a fixed time, 20 s at most.
        run_ended = time.time()
        deadline = time.monotonic() + 20
        while True:
            up = prometheus_query(prometheus_port, 'up{job="quotagate"}')
            scraped = prometheus_query(prometheus_port, 'max(timestamp(up{job="quotagate"}))').get("", 0.0)
            if (up == {"": 1.0} and scraped > run_ended) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert up == {"": 1.0}, f"Prometheus does not scrape the proxy: {up}"
        throttle = prometheus_query(
            prometheus_port, "sum by (client_id) (increase(quotagate_produce_throttle_time_seconds_total[30s]))"
        )
        produced = prometheus_query(
            prometheus_port, "sum by (client_id) (increase(quotagate_produce_bytes_total[30s]))"
        )
        print(f"throttle seconds: {throttle}; bytes: {produced}")
        assert throttle.get("throttled", 0) > 0, throttle
        assert throttle.get("free", 0) == 0, throttle
        assert produced.get("free", 0) > produced.get("throttled", 0) > 0, produced
    finally:
        server.terminate()
        server.wait(10)
