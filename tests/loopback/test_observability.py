"""The usage recorder against a sink that stops taking records (real time passes), and the admin
endpoints served on a loopback port."""

from __future__ import annotations

import asyncio
import json

from quotagate.config.settings import UsageConfig
from quotagate.protocol.apis import ApiKey
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.usage import Piece, Sink, SinkResult, UsageRecorder
from quotagate.quotas.apis import policy
from quotagate.quotas.charging import count_exchange
from tests.support.http import http_get
from tests.support.usage import record


class StuckSink(Sink):
    def __init__(self) -> None:
        self.release = asyncio.Event()

    def encode(self, records: object) -> list[Piece]:
        return [Piece("", None, len(records), len(records))]  # type: ignore[arg-type]

    async def write_encoded(self, pieces: list[list[Piece]]) -> SinkResult:
        await self.release.wait()
        return SinkResult()


async def test_a_stuck_sink_bounds_memory_and_counts_what_it_drops() -> None:
    metrics = ProxyMetrics()
    sink = StuckSink()
    config = UsageConfig(enabled=True, records="request", buffer_records=100, flush_interval_seconds=0.01)
    recorder = UsageRecorder(config, metrics, sink)
    task = asyncio.create_task(recorder.run())
    await asyncio.sleep(0.05)
    for i in range(100):
        recorder.add(record(i))
    await asyncio.sleep(0.05)  # the flush takes those 100 and gets stuck in the sink
    for i in range(250):
        recorder.add(record(i))  # the hot path never waits: 100 kept, 150 dropped
    assert len(recorder.collector) == 100
    assert metrics.usage_dropped_total._value.get() == 150
    sink.release.set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_admin_endpoints_serve_metrics_health_readiness_and_quota_state(rig) -> None:
    proxy, _broker, _port = rig
    from tests.support.proxy_fixtures import free_port_block

    port = free_port_block(1)
    from quotagate.proxy.admin_http import AdminHttpServer

    server = AdminHttpServer(proxy)
    await server.start("127.0.0.1", port)
    try:
        count_exchange(proxy.entity_metrics.entity("alice", "app", 0.0), policy(ApiKey.PRODUCE), 100, 10, 1.0, 0)
        status, body = await http_get(port, "/metrics")
        assert status == 200 and "quotagate_requests_total" in body and 'client_id="app"' in body
        assert (await http_get(port, "/healthz"))[0] == 200
        status, body = await http_get(port, "/readyz")
        assert status == 503 and "no bootstrap server reachable" in body  # the double answers no metadata
        proxy.discovery._set_reachable(True)
        assert (await http_get(port, "/readyz"))[0] == 200
        status, body = await http_get(port, "/quotas")
        state = json.loads(body)
        assert status == 200 and state["entities"][0]["user"] == "alice"
        assert state["entities"][0]["muted_connections"] == 0, "a real Proxy's clients, counted for quotagate top"
        assert (await http_get(port, "/nope"))[0] == 404
    finally:
        await server.stop()
