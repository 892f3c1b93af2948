"""Metrics and per-entity state that a client could size: random API keys, huge client ids, many
entities, scrapes of all of them. Each stays bounded, and a scrape does not run on the event loop."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, generate_latest

from quotagate.protocol.apis import ApiKey
from quotagate.proxy.entity_metrics import MAX_LABEL_CHARS, EntityMetrics
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.session import observe_latency
from quotagate.quotas import QuotaEngine


def test_random_api_keys_fold_into_one_unknown_series() -> None:
    metrics = ProxyMetrics()
    for api_key in (0, 3, 92, 93, 1000, 32767, -1, -32768):
        metrics.count_request(api_key)
        observe_latency(metrics.latency_by_key, api_key, 0.001)
    text = generate_latest(metrics.registry).decode()
    assert sorted(re.findall(r'quotagate_requests_total\{api_key="([^"]+)"\} (\S+)', text)) == [
        ("0", "1.0"),
        ("3", "1.0"),
        ("92", "1.0"),
        ("unknown", "5.0"),
    ]
    assert 'quotagate_upstream_latency_seconds_count{api_key="unknown"} 5.0' in text


def test_user_and_client_id_labels_are_bounded_and_long_names_stay_apart() -> None:
    collector = EntityMetrics(lambda: QuotaEngine(), lambda: 0.0, max_entities=10)
    long_a, long_b = "a" * 32768, "a" * 32767 + "b"
    for client_id in (long_a, long_b, "short"):
        collector.record_response("u" * 5000, client_id, ApiKey.PRODUCE, 100, 10, 1.0, 0, now=0.0)
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    labels = re.findall(r'(?:user|client_id)="([^"]*)"', text)
    assert max(map(len, labels)) <= MAX_LABEL_CHARS
    client_ids = set(re.findall(r'quotagate_produce_bytes_total\{client_id="([^"]*)"', text))
    assert len(client_ids) == 4 and "short" in client_ids and "other" in client_ids  # the long two differ
    assert len(text) < 20_000, f"{len(text)} bytes of /metrics for 3 entities"
    assert max(len(c) for key in collector.stats for c in key) <= MAX_LABEL_CHARS, "kept keys are bounded too"


def test_idle_entities_are_forgotten_and_their_counts_stay_in_other() -> None:
    collector = EntityMetrics(lambda: QuotaEngine(), lambda: 0.0, max_entities=10)
    for i in range(1000):
        collector.record_response("u", f"random-{i}", ApiKey.PRODUCE, 10, 0, None, 0, now=0.0)
    collector.record_response("u", "live", ApiKey.PRODUCE, 7, 0, None, 0, now=3500.0)
    assert collector.expire_idle(3600.0) == 1000
    assert list(collector.stats) == [("u", "live")]
    exported, other = collector.ranked()
    assert other.produce_bytes == 10_000 and exported[0][1].produce_bytes == 7
