"""Metrics and per-entity state that a client could size: random API keys, huge client ids, many
entities, scrapes of all of them. Each stays bounded, and a scrape does not run on the event loop."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, generate_latest

from quotagate.protocol.apis import ApiKey
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable
from quotagate.quotas.apis import policy
from quotagate.quotas.charging import count_exchange
from quotagate.quotas.entities import MAX_NAME_CHARS


def test_random_api_keys_fold_into_one_unknown_series() -> None:
    metrics = ProxyMetrics()
    for api_key in (0, 3, 94, 95, 1000, 32767, -1, -32768):
        metrics.counters.count_request(api_key)
        metrics.counters.observe_latency(api_key, 0.001)
    text = generate_latest(metrics.registry).decode()
    assert sorted(re.findall(r'quotagate_requests_total\{api_key="([^"]+)"\} (\S+)', text)) == [
        ("0", "1.0"),
        ("3", "1.0"),
        ("94", "1.0"),
        ("unknown", "5.0"),
    ]
    assert 'quotagate_upstream_latency_seconds_count{api_key="unknown"} 5.0' in text


def test_user_and_client_id_labels_are_bounded_and_long_names_stay_apart() -> None:
    collector = EntityMetrics(lambda: QuotaEngine(), lambda: 0.0, max_entities=10)
    long_a, long_b = "a" * 32768, "a" * 32767 + "b"
    for client_id in (long_a, long_b, "short"):
        count_exchange(collector.entity("u" * 5000, client_id, 0.0), policy(ApiKey.PRODUCE), 100, 10, 1.0, 0)
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    labels = re.findall(r'(?:user|client_id)="([^"]*)"', text)
    assert max(map(len, labels)) <= MAX_NAME_CHARS
    client_ids = set(re.findall(r'quotagate_produce_bytes_total\{client_id="([^"]*)"', text))
    assert len(client_ids) == 4 and "short" in client_ids and "other" in client_ids  # the long two differ
    assert len(text) < 20_000, f"{len(text)} bytes of /metrics for 3 entities"
    assert max(len(c) for key in collector.stats for c in key) <= MAX_NAME_CHARS, "kept keys are bounded too"


def test_idle_entities_are_forgotten_and_their_counts_stay_in_other() -> None:
    collector = EntityMetrics(lambda: QuotaEngine(), lambda: 0.0, max_entities=10)
    for i in range(1000):
        count_exchange(collector.entity("u", f"random-{i}", 0.0), policy(ApiKey.PRODUCE), 10, 0, None, 0)
    count_exchange(collector.entity("u", "live", 3500.0), policy(ApiKey.PRODUCE), 7, 0, None, 0)
    assert collector.expire_idle(3600.0) == 1000
    assert list(collector.stats) == [("u", "live")]
    exported, other = collector.ranked()
    assert other.produce_bytes == 10_000 and exported[0][1].produce_bytes == 7


def test_quota_state_per_client_id_is_bounded_whatever_the_ids_length_and_expires() -> None:
    """Issue 26: 20 000 produce requests with 32 000-byte client ids under a <default> quota took
    the RSS from 64 to 721 MB: the resolution cache and the buckets kept every id whole."""
    table = QuotaTable({QuotaEntity(None, "<default>"): {QuotaKey.PRODUCER_BYTE_RATE: 1e6}})
    engine = QuotaEngine(table)
    for i in range(200):
        client_id = f"{i:05d}".ljust(32_000, "x")
        engine.entity_buckets("u", client_id, 0.0)
        engine.charge("u", client_id, QuotaKey.PRODUCER_BYTE_RATE, 100, 0.0)
    assert len(engine.buckets) == 200, "the long ids stay apart"
    kept = [name for bucket_id in engine.buckets for name in bucket_id if name is not None]
    kept += [name for key in table._cache for name in key]
    assert max(map(len, kept)) <= MAX_NAME_CHARS
    # A configured long id matches its clients as before.
    long_id = "y" * 32_000
    named = QuotaTable({QuotaEntity(None, long_id): {QuotaKey.PRODUCER_BYTE_RATE: 5.0}})
    resolution = named.resolve("u", long_id, QuotaKey.PRODUCER_BYTE_RATE)
    assert resolution is not None and resolution.value == 5.0 and resolution.entity.client_id == long_id
    assert named.resolve("u", long_id[:-1] + "z", QuotaKey.PRODUCER_BYTE_RATE) is None
    # Idle full buckets go, and the cached resolutions with them.
    assert engine.expire_idle(3600.0, idle_seconds=60.0) == 200
    assert engine.buckets == {} and table._cache == {}


def test_a_new_entity_beyond_max_tracked_does_not_scan_every_tracked_one() -> None:
    """Issue 26: throughput on new client ids fell from ~526 to ~108 requests/s once 10 000 entities
    were tracked: each new id scanned all of them for idle ones."""
    collector = EntityMetrics(lambda: QuotaEngine(), lambda: 0.0, max_entities=10)
    for i in range(collector.max_tracked):
        count_exchange(collector.entity("u", f"id-{i}", 0.0), policy(ApiKey.PRODUCE), 10, 0, None, 0)
    scans = []
    expire_idle = collector.expire_idle

    def counted(now: float, idle_seconds: float = 3600.0) -> int:
        scans.append(now)
        return expire_idle(now, idle_seconds)

    collector.expire_idle = counted  # type: ignore[method-assign]
    for i in range(1000):
        count_exchange(collector.entity("u", f"new-{i}", 10.0 + i / 1000), policy(ApiKey.PRODUCE), 10, 0, None, 0)
    assert len(scans) <= 1, f"{len(scans)} scans of {collector.max_tracked} entities for 1000 new ids"
    assert collector.untracked.produce_bytes == 10_000  # counted in "other", not lost
