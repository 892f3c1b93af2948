"""Metrics and per-entity state that a client could size: random API keys, huge client ids, many
entities, scrapes of all of them. Each stays bounded, and a scrape does not run on the event loop."""

from __future__ import annotations

import asyncio
import re
import threading

from prometheus_client import CollectorRegistry, generate_latest

from quotagate.protocol.apis import ApiKey
from quotagate.proxy.admin_http import AdminHttpServer
from quotagate.proxy.entity_metrics import MAX_LABEL_CHARS, EntityMetrics
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.session import observe_latency
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable
from tests.proxy_fixtures import free_port_block
from tests.unit.test_connection import rig  # noqa: F401  (fixture)
from tests.unit.test_observability import http_get


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


async def test_the_proxy_drops_full_idle_buckets_and_idle_entities(rig) -> None:  # noqa: F811
    proxy, _broker, _port = rig
    proxy.engine.update(
        QuotaTable({QuotaEntity(None, "<default>"): {QuotaKey.PRODUCER_BYTE_RATE: 1000}}), proxy.engine.windows, 0.0
    )
    for i in range(2000):
        client_id = f"random-{i}"
        proxy.engine.charge("u", client_id, QuotaKey.PRODUCER_BYTE_RATE, 500, now=0.0)
        proxy.entity_metrics.record_response("u", client_id, ApiKey.PRODUCE, 500, 0, None, 0, now=0.0)
    proxy.engine.charge("u", "in-debt", QuotaKey.PRODUCER_BYTE_RATE, 10**9, now=0.0)
    assert len(proxy.engine.buckets) == 2001
    buckets, entities = proxy.expire_idle_state(now=3600.0)
    assert (buckets, entities) == (2000, 2000)
    assert list(proxy.engine.buckets) != [] and len(proxy.engine.buckets) == 1, "a bucket in debt is kept"
    assert proxy.engine.throttle_ms("u", "in-debt", QuotaKey.PRODUCER_BYTE_RATE, 3600.0) > 0


async def test_metrics_and_quota_scrapes_render_off_the_event_loop(rig) -> None:  # noqa: F811
    proxy, _broker, _port = rig
    for i in range(3000):
        proxy.entity_metrics.record_response("u", f"c-{i}", ApiKey.PRODUCE, 100 + i, 10, 1.0, 0, now=0.0)
    server = AdminHttpServer(proxy)
    rendered_on: list[str] = []
    route = server.route

    def recording_route(method: str, path: str):
        rendered_on.append(threading.current_thread().name)
        return route(method, path)

    server.route = recording_route  # type: ignore[method-assign]
    port = free_port_block(1)
    await server.start("127.0.0.1", port)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    ticking = asyncio.get_running_loop().create_task(ticker())
    try:
        for path in ("/metrics", "/quotas"):
            status, body = await http_get(port, path)
            assert status == 200 and "c-2999" in body
        assert (await http_get(port, "/healthz"))[0] == 200
    finally:
        ticking.cancel()
        await server.stop()
    main = threading.main_thread().name
    assert rendered_on[:2] == [name for name in rendered_on[:2] if name != main], rendered_on
    assert rendered_on[2] == main, "cheap endpoints stay on the loop"
    assert ticks > 0, "the loop kept turning while the scrapes rendered"
