"""A proxy in front of a broker double (loopback) under attacker-sized state: idle buckets and entities
are dropped, and big scrapes render off the event loop."""

from __future__ import annotations

import asyncio
import threading

from quotagate.protocol.apis import ApiKey
from quotagate.proxy.admin_http import AdminHttpServer
from quotagate.quotas import QuotaEntity, QuotaKey, QuotaTable
from quotagate.quotas.apis import policy
from quotagate.quotas.charging import count_exchange
from tests.support.http import http_get
from tests.support.proxy_fixtures import free_port_block


async def test_the_proxy_drops_full_idle_buckets_and_idle_entities(rig) -> None:
    proxy, _broker, _port = rig
    proxy.engine.update(
        QuotaTable({QuotaEntity(None, "<default>"): {QuotaKey.PRODUCER_BYTE_RATE: 1000}}), proxy.engine.windows, 0.0
    )
    for i in range(2000):
        client_id = f"random-{i}"
        proxy.engine.charge("u", client_id, QuotaKey.PRODUCER_BYTE_RATE, 500, now=0.0)
        count_exchange(proxy.entity_metrics.entity("u", client_id, 0.0), policy(ApiKey.PRODUCE), 500, 0, None, 0)
    proxy.engine.charge("u", "in-debt", QuotaKey.PRODUCER_BYTE_RATE, 10**9, now=0.0)
    assert len(proxy.engine.buckets) == 2001
    buckets, entities = proxy.expire_idle_state(now=3600.0)
    assert (buckets, entities) == (2000, 2000)
    assert list(proxy.engine.buckets) != [] and len(proxy.engine.buckets) == 1, "a bucket in debt is kept"
    assert proxy.engine.throttle_ms("u", "in-debt", QuotaKey.PRODUCER_BYTE_RATE, 3600.0) > 0


async def test_metrics_and_quota_scrapes_render_off_the_event_loop(rig) -> None:
    proxy, _broker, _port = rig
    for i in range(3000):
        count_exchange(proxy.entity_metrics.entity("u", f"c-{i}", 0.0), policy(ApiKey.PRODUCE), 100 + i, 10, 1.0, 0)
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
