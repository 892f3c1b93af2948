"""The HTTP endpoints' answers (admin_http.py's `route`), against what they declare they read of the
proxy (`AdminContext`): a small double of plain parts here, no Proxy, loop or socket.
tests/loopback/test_observability.py serves them over HTTP from a real proxy."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from quotagate.config import parse_config
from quotagate.proxy.admin_http import AdminContext, AdminHttpServer
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.quota_admin import QuotaAdmin
from quotagate.quotas import QuotaEngine, QuotaKey
from tests.support.in_process import Clock

CONFIG = (
    '[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\nport = 1\n[[quotas]]\nuser = "alice"\nproducer_byte_rate = 1000\n'
)


@dataclass
class State:
    """An AdminContext of plain parts: one engine, its admin, entity metrics and a clock."""

    engine: QuotaEngine
    quota_admin: QuotaAdmin
    entity_metrics: EntityMetrics
    loop: Clock = field(default_factory=lambda: Clock(10.0))  # type: ignore[assignment]
    metrics: ProxyMetrics = field(default_factory=ProxyMetrics)
    delay_queue: list[object] = field(default_factory=list)  # type: ignore[assignment]
    problems: list[str] = field(default_factory=list)

    def readiness_problems(self) -> list[str]:
        return self.problems


def state() -> State:
    config = parse_config(CONFIG)
    engine = QuotaEngine(config.quotas, config.windows)
    admin = QuotaAdmin(config.quotas, {}, (), None, lambda quotas, now: engine.update(quotas, engine.windows, now))
    return State(engine, admin, EntityMetrics(lambda: engine, lambda: 10.0, 100))


def test_readyz_answers_503_with_the_proxys_reasons_and_200_without() -> None:
    proxy = state()
    server = AdminHttpServer(proxy)
    proxy.problems = ["no listener is up"]
    status, content_type, body = server.route("GET", "/readyz")
    assert (status, content_type) == (503, "application/json")
    assert json.loads(body) == {"ready": False, "problems": ["no listener is up"]}
    proxy.problems = []
    assert server.route("GET", "/readyz")[0] == 200
    assert server.route("POST", "/readyz")[0] == 405


def test_quotas_shows_each_tracked_entitys_quota_tokens_and_throttle() -> None:
    proxy: AdminContext = state()
    now = proxy.loop.time()
    proxy.engine.charge("alice", "app", QuotaKey.PRODUCER_BYTE_RATE, 100_000, now)
    proxy.entity_metrics.entity("alice", "app", now)
    view = AdminHttpServer(proxy).quota_state()
    (configured,) = view["configured"]
    assert (configured["user"], configured["producer_byte_rate"], configured["source"]) == (
        "alice",
        1000,
        {"producer_byte_rate": "file"},
    )
    (entity,) = view["entities"]
    quota = entity["quotas"]["producer_byte_rate"]
    assert (quota["matched"], quota["quota"]) == ("user=alice", 1000), quota
    assert quota["tokens"] < 0 and quota["throttle_ms"] > 0, quota
    assert view["delay_queue_size"] == 0
