"""The proxy's HTTP endpoints, served on its own event loop: /metrics, /healthz, /readyz, /quotas.

The server runs on the proxy's loop; /metrics and /quotas bodies are rendered in one worker thread,
because rendering thousands of entities takes long enough (0.6-1 s measured) to stall every client
if done on the loop. The renderers only read: the tables they walk are copied with one C call
(list(dict.items())), token balances are read without refilling (`TokenBucket.tokens_at`), and the
hot path keeps taking no lock. Requests are tiny GETs: the server reads the request head, answers,
and closes the connection.

- /metrics: Prometheus text format.
- /healthz: 200 while the process runs.
- /readyz: 200 when the listeners are up and a broker answered the last metadata refresh; else
  503 with the reasons, as JSON.
- /quotas: JSON view of quota state: the quotas in force, each key with its source ("file": the
  TOML file, "api": set with kafka-configs.sh / AlterClientQuotas), and for every tracked entity the
  quota matched per key (level, entity, value), its tokens and its current throttle, and how many of
  its connections are muted now.
- /quotas/explain?user=U&client_id=C[&ip=A]: why each quota applies to that client, and which
  entries lost (quotagate.quotas.explain); user defaults to ANONYMOUS, client_id to "".
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
from collections import Counter
from collections.abc import Collection, Sized
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.quota_admin import QuotaAdmin
from quotagate.quotas import ANONYMOUS, QuotaEngine, QuotaKey
from quotagate.quotas.entities import bounded_name
from quotagate.quotas.explain import explain, tenant_states

log = logging.getLogger("quotagate.http")

MAX_REQUEST_HEAD = 16 * 1024
RENDERED_OFF_LOOP = frozenset({"/metrics", "/quotas", "/quotas/explain"})
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class EntityOfSession(Protocol):
    """Whose requests a client connection's session charges: its user and last client id."""

    @property
    def user(self) -> str: ...

    @property
    def entity_client_id(self) -> str: ...


class HeldClient(Protocol):
    """A client connection as /quotas reads it: muted or not, and whose."""

    @property
    def muted(self) -> bool: ...

    @property
    def session(self) -> EntityOfSession: ...


class AdminContext(Protocol):
    """What the endpoints read of the proxy, and nothing more (`Proxy` is one; a test hands a small double)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...  # its clock: tokens and throttles as of now

    @property
    def metrics(self) -> ProxyMetrics: ...  # /metrics renders its registry

    @property
    def engine(self) -> QuotaEngine: ...  # the quotas in force and every entity's buckets

    @property
    def quota_admin(self) -> QuotaAdmin: ...  # where each quota came from (file or api)

    @property
    def entity_metrics(self) -> EntityMetrics: ...  # the entities tracked

    @property
    def delay_queue(self) -> Sized: ...  # how many connections are muted

    @property
    def clients(self) -> Collection[HeldClient]: ...  # which entities' connections are muted

    def readiness_problems(self) -> list[str]:
        """Why the proxy is not ready; empty when it is."""


class AdminHttpServer:
    def __init__(self, proxy: AdminContext) -> None:
        self.proxy = proxy
        self.server: asyncio.Server | None = None
        # One thread: concurrent scrapes queue instead of multiplying the work.
        self._renderer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="quotagate-scrape")

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._serve, host, port)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        self._renderer.shutdown(wait=False)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, path = _request_line(head)
            if path.split("?", 1)[0] in RENDERED_OFF_LOOP:
                loop = asyncio.get_running_loop()
                status, content_type, body = await loop.run_in_executor(self._renderer, self.route, method, path)
            else:
                status, content_type, body = self.route(method, path)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            writer.close()
            return
        except Exception:  # a bug in rendering answers 500, it never just drops the scrape
            log.exception("rendering an HTTP answer failed")
            status, content_type, body = 500, "text/plain", b"internal error: see the proxy's log\n"
        writer.write(
            f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        try:
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    def route(self, method: str, path: str) -> tuple[int, str, bytes]:
        if method != "GET":
            return 405, "text/plain", b"only GET\n"
        path, _, query = path.partition("?")
        if path == "/quotas/explain":
            return self.explain(query)
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.proxy.metrics.registry)
        if path == "/healthz":
            return 200, "text/plain", b"ok\n"
        if path == "/readyz":
            problems = self.proxy.readiness_problems()
            body = json.dumps({"ready": not problems, "problems": problems}).encode() + b"\n"
            return (503 if problems else 200), "application/json", body
        if path == "/quotas":
            return 200, "application/json", json.dumps(self.quota_state(), indent=2).encode() + b"\n"
        return 404, "text/plain", b"try /metrics, /healthz, /readyz, /quotas or /quotas/explain?user=U&client_id=C\n"

    def explain(self, query: str) -> tuple[int, str, bytes]:
        """GET /quotas/explain?user=U&client_id=C[&ip=A]: quotagate.quotas.explain for that client."""
        try:
            params = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
        except ValueError as exc:
            return 400, "text/plain", f"bad query string: {exc}\n".encode()
        unknown = sorted(set(params) - {"user", "client_id", "ip"})
        twice = sorted(name for name, values in params.items() if len(values) > 1)
        if unknown or twice:
            problem = f"unknown parameter {unknown[0]}" if unknown else f"parameter {twice[0]} given twice"
            return 400, "text/plain", f"{problem} (known: user, client_id, ip)\n".encode()
        proxy = self.proxy
        answer = explain(
            proxy.engine,
            params.get("user", [ANONYMOUS])[0],
            params.get("client_id", [""])[0],
            proxy.loop.time(),
            proxy.quota_admin.source,
            params.get("ip", [None])[0],
        )
        return 200, "application/json", json.dumps(answer, indent=2).encode() + b"\n"

    def quota_state(self) -> dict[str, Any]:
        proxy = self.proxy
        engine = proxy.engine
        now = proxy.loop.time()
        admin = proxy.quota_admin
        configured = [
            {
                "user": entity.user,
                "client_id": entity.client_id,
                # issue 28: the entity parts that are set only for a prefix or an ip entry
                **({"client_id_prefix": entity.client_id_prefix} if entity.client_id_prefix is not None else {}),
                **({"ip": entity.ip} if entity.ip is not None else {}),
                **{key.value: value for key, value in values.items()},
                "source": {key.value: admin.source(entity, key) for key in values},
                "shadow": entity in engine.table.shadow,
            }
            for entity, values in engine.table.items()
        ]
        muted = self.muted_by_entity()
        muted_by_tenant: Counter[str] = Counter()
        entities = []
        tenants = engine.table.tenants
        for (user, client_id), stats in sorted(list(proxy.entity_metrics.stats.items())):
            quotas = {}
            for key in QuotaKey:
                resolution = engine.resolve(user, client_id, key)
                if resolution is None:
                    continue
                quotas[key.value] = {
                    "level": resolution.level,
                    "matched": str(resolution.entity),
                    "quota": resolution.value,
                    "tokens": round(engine.tokens(resolution, now), 3),
                    # A shadow entry's is the throttle it would give (never applied).
                    "throttle_ms": engine.would_throttle_ms(user, client_id, key, now),
                    "shadow": resolution.shadow,
                }
            tenant = proxy.entity_metrics.tenant_of((user, client_id), stats, tenants)
            entities.append(
                {
                    "user": user,
                    "client_id": client_id,
                    "tenant": None if tenant is None else tenant.name,
                    "quotas": quotas,
                    "muted_connections": muted.get((user, client_id), 0),
                }
            )
            if tenant is not None:
                muted_by_tenant[tenant.name] += muted.get((user, client_id), 0)
        return {
            "configured": configured,
            "entities": entities,
            "tenants": tenant_states(
                engine,
                now,
                {name: members for name, (_, members) in proxy.entity_metrics.tenant_sums().items()},
                muted_by_tenant,
            ),
            "delay_queue_size": len(proxy.delay_queue),
        }

    def muted_by_entity(self) -> Counter[tuple[str, str]]:
        """(user, client id) -> its client connections muted for a quota now, keyed as the entity
        metrics are (bounded names). list(): the loop adds and removes clients while this thread reads."""
        return Counter(
            (bounded_name(client.session.user), bounded_name(client.session.entity_client_id))
            for client in list(self.proxy.clients)
            if client.muted
        )


def _request_line(head: bytes) -> tuple[str, str]:
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError(f"bad request line {line!r}")
    return parts[0], parts[1]
