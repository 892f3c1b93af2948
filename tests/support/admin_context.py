"""An AdminContext (quotagate/proxy/admin_http.py) of plain parts: one engine, its admin, entity
metrics registered in a metrics registry, client connections and a clock; no Proxy, loop or socket.
What a proxy's endpoints would answer, for the tests of the endpoints and of `quotagate top`."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import generate_latest

from quotagate.config import parse_config
from quotagate.proxy.admin_http import AdminHttpServer
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.quota_admin import QuotaAdmin
from quotagate.quotas import QuotaEngine
from tests.support.in_process import Clock

CONFIG = '[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\nport = 1\n'


@dataclass
class Session:
    user: str
    entity_client_id: str


@dataclass
class Client:
    """A client connection as /quotas reads it."""

    session: Session
    muted: bool = False


@dataclass
class State:
    engine: QuotaEngine
    quota_admin: QuotaAdmin
    entity_metrics: EntityMetrics
    loop: Clock
    metrics: ProxyMetrics = field(default_factory=ProxyMetrics)
    delay_queue: list[object] = field(default_factory=list)  # type: ignore[assignment]
    clients: list[Client] = field(default_factory=list)  # type: ignore[assignment]
    problems: list[str] = field(default_factory=list)

    def readiness_problems(self) -> list[str]:
        return self.problems

    def metrics_text(self) -> str:
        return generate_latest(self.metrics.registry).decode()

    def quotas(self) -> dict:
        return AdminHttpServer(self).quota_state()


def state(quotas_toml: str = "", now: float = 10.0) -> State:
    """`quotas_toml`: [[quotas]] tables for the configuration."""
    config = parse_config(CONFIG + quotas_toml)
    engine = QuotaEngine(config.quotas, config.windows)
    admin = QuotaAdmin(config.quotas, {}, (), None, lambda quotas, now: engine.update(quotas, engine.windows, now))
    clock = Clock(now)
    entity_metrics = EntityMetrics(lambda: engine, clock.time, 100)
    proxy = State(engine, admin, entity_metrics, clock)
    proxy.metrics.registry.register(entity_metrics)
    return proxy
