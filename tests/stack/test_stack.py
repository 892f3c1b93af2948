"""End-to-end checks of a running docker-compose stack: `docker compose --profile test run --rm tests`.

They need the stack, so they run only when QUOTAGATE_STACK_BOOTSTRAP is set (the compose `tests`
service sets it, and the URLs below); `make test` skips them. Each says which service was wrong.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient

BOOTSTRAP = os.environ.get("QUOTAGATE_STACK_BOOTSTRAP", "")
ADMIN = os.environ.get("QUOTAGATE_STACK_ADMIN", "http://localhost:9190")
PROMETHEUS = os.environ.get("QUOTAGATE_STACK_PROMETHEUS", "")
GRAFANA = os.environ.get("QUOTAGATE_STACK_GRAFANA", "")
DEMO_CLIENT_ID = os.environ.get("QUOTAGATE_STACK_DEMO_CLIENT_ID", "")
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not BOOTSTRAP, reason="no compose stack: QUOTAGATE_STACK_BOOTSTRAP is unset (the compose `tests` service sets it)"
)


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def get_json(url: str) -> Any:
    status, body = get(url)
    assert status == 200, f"{url}: {status} {body[:300]!r}"
    return json.loads(body)


def eventually(check: Any, what: str, timeout: float = 60.0) -> Any:
    """Calls check() until it returns something true; the stack may still be warming up."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not seen within {timeout:.0f} s", pytrace=False)
        time.sleep(1.0)


def metric_values(name: str, **labels: str) -> list[float]:
    """Values of the proxy's /metrics samples of `name` whose labels include `labels`."""
    status, body = get(f"{ADMIN}/metrics")
    assert status == 200, f"quotagate /metrics: {status}"
    values = []
    for line in body.decode().splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match and all(f'{key}="{value}"' in (match.group(1) or "") for key, value in labels.items()):
            values.append(float(match.group(2)))
    return values


def test_quotagate_is_ready() -> None:
    status, body = get(f"{ADMIN}/readyz")
    assert status == 200, f"quotagate /readyz: {status} {body!r}"
    assert get(f"{ADMIN}/healthz")[0] == 200


def test_clients_see_only_the_proxy() -> None:
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, client_id="stack-tests")
    try:
        brokers = admin.describe_cluster()["brokers"]
    finally:
        admin.close()
    bootstrap_host, bootstrap_port = BOOTSTRAP.rsplit(":", 1)
    assert brokers, "no broker in DescribeCluster"
    for broker in brokers:
        assert broker["host"] == bootstrap_host, broker
        assert broker["port"] == int(bootstrap_port) + 1 + broker["broker_id"], broker  # broker_port_base + N


def test_produce_and_consume_through_the_proxy() -> None:
    topic = f"stack-{uuid.uuid4().hex[:8]}"
    values = [f"record-{i}".encode() for i in range(100)]
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, client_id="stack-tests", acks="all")
    try:
        for value in values:
            producer.send(topic, value)
        producer.flush(timeout=60)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic, bootstrap_servers=BOOTSTRAP, client_id="stack-tests", auto_offset_reset="earliest", group_id=None
    )
    received: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(received) < len(values) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                received += [record.value for record in records]
    finally:
        consumer.close()
    assert sorted(received) == sorted(values)


@pytest.mark.skipif(not DEMO_CLIENT_ID, reason="QUOTAGATE_STACK_DEMO_CLIENT_ID unset: no demo producer")
def test_demo_producer_is_held_to_its_quota() -> None:
    quotas = get_json(f"{ADMIN}/quotas")
    configured = [entry for entry in quotas["configured"] if entry["client_id"] == DEMO_CLIENT_ID]
    assert configured, f"no quota for client_id {DEMO_CLIENT_ID} in {quotas['configured']}"
    quota = configured[0]["producer_byte_rate"]
    eventually(
        lambda: sum(metric_values("quotagate_produce_throttle_time_seconds_total", client_id=DEMO_CLIENT_ID)) > 0,
        f"throttle time for {DEMO_CLIENT_ID}",
    )
    before, start = sum(metric_values("quotagate_produce_bytes_total", client_id=DEMO_CLIENT_ID)), time.monotonic()
    time.sleep(15)
    after, end = sum(metric_values("quotagate_produce_bytes_total", client_id=DEMO_CLIENT_ID)), time.monotonic()
    rate = (after - before) / (end - start)
    # It asks 4 x its quota; over 15 s it gets the quota, plus at most what a burst lets through.
    assert 0 < rate <= 2 * quota, f"{DEMO_CLIENT_ID} produced {rate:.0f} B/s under a {quota} B/s quota"


@pytest.mark.skipif(not PROMETHEUS, reason="QUOTAGATE_STACK_PROMETHEUS unset")
def test_prometheus_scrapes_quotagate_and_loaded_the_alerts() -> None:
    def quotagate_up() -> bool:
        targets = get_json(f"{PROMETHEUS}/api/v1/targets")["data"]["activeTargets"]
        return any(t["labels"].get("job") == "quotagate" and t["health"] == "up" for t in targets)

    eventually(quotagate_up, "Prometheus target job=quotagate up")
    groups = get_json(f"{PROMETHEUS}/api/v1/rules")["data"]["groups"]
    loaded = {rule["name"] for group in groups if group["name"] == "quotagate" for rule in group["rules"]}
    shipped = set(re.findall(r"^\s*- alert:\s*(\S+)", (ROOT / "ops/prometheus/alerts.yml").read_text(), re.M))
    assert loaded == shipped, f"Prometheus loaded {sorted(loaded)}, ops/prometheus/alerts.yml has {sorted(shipped)}"


@pytest.mark.skipif(not GRAFANA, reason="QUOTAGATE_STACK_GRAFANA unset")
def test_grafana_has_the_dashboard_and_the_data_source() -> None:
    uid = json.loads((ROOT / "ops/grafana/quotagate-dashboard.json").read_text())["uid"]
    eventually(lambda: get(f"{GRAFANA}/api/health")[0] == 200, "Grafana /api/health")
    found = get_json(f"{GRAFANA}/api/search?query=quotagate")
    assert any(item.get("uid") == uid for item in found), f"dashboard {uid} not provisioned: {found}"
    dashboard = get_json(f"{GRAFANA}/api/dashboards/uid/{uid}")["dashboard"]
    assert dashboard["title"] == "quotagate"
    # The dashboard's queries go through the provisioned Prometheus: one of them answers with data.
    status, body = get(f"{GRAFANA}/api/datasources/proxy/uid/prometheus/api/v1/query?query=up")
    assert status == 200 and b'"job":"quotagate"' in body, f"Grafana -> Prometheus: {status} {body[:300]!r}"
