"""The proxy: a bootstrap listener, one listener per broker, and broker discovery.

Broker listeners: node N is served on `broker_port_base + N`. A listener is opened the first time a
broker is named, by the proxy's own metadata refresh or by any response the proxy rewrites, and its
socket is bound and listening before the rewritten response leaves, so a client can never be told
a port that is not accepting yet. Listeners stay open when a broker disappears from metadata (a
restarting broker comes back under the same id); connecting to a broker that is down closes the
client's connection, and the client retries as it would against the broker itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from quotagate.config import Config
from quotagate.config.reload import ConfigWatcher
from quotagate.protocol.discovery import decode_discovery, encode_discovery_request
from quotagate.protocol.framing import FrameError
from quotagate.protocol.rewrite import response_rewriters
from quotagate.proxy.admin_http import AdminHttpServer
from quotagate.proxy.cluster import SharedQuotas
from quotagate.proxy.connection import ClientConnection
from quotagate.proxy.delay_queue import DelayQueue
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.session import SessionServices
from quotagate.proxy.topics import TopicCatalog
from quotagate.proxy.usage import UsageRecorder, make_sink
from quotagate.quotas import QuotaEngine, QuotaKey
from quotagate.quotas.engine import local_bucket
from quotagate.quotas.topic_thresholds import TopicThresholdGuard

log = logging.getLogger("quotagate.proxy")

BOOTSTRAP = "bootstrap"


def bind_listening_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """reuse_port: several worker processes listen on the port and the kernel spreads connections."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=1024, reuse_port=reuse_port)
    sock.setblocking(False)
    return sock


class Proxy:
    def __init__(self, config: Config, metrics: ProxyMetrics | None = None, worker: int = 0) -> None:
        self.config = config
        self.worker = worker  # 0..workers-1: which of this host's worker processes this is
        self.metrics = metrics or ProxyMetrics()
        self.loop = asyncio.get_running_loop()
        # Several processes (workers, replicas) share the quotas: the buckets are leased from Redis,
        # or hold 1/N of each quota without it. One process alone keeps plain local buckets.
        self.shared_quotas = (
            SharedQuotas(config.cluster, config.processes, self.metrics, self.loop.time)
            if config.shares_quotas
            else None
        )
        bucket_factory = self.shared_quotas.bucket if self.shared_quotas else local_bucket
        # One engine and one delay queue for every listener: an entity's connections to all the
        # brokers draw on the same buckets, so quotas hold for the cluster.
        self.engine = QuotaEngine(config.quotas, config.windows, bucket_factory)
        self.delay_queue = DelayQueue(self.loop)
        self.entity_metrics = EntityMetrics(lambda: self.engine, self.loop.time, config.metrics.max_entities)
        self.metrics.registry.register(self.entity_metrics)
        self.metrics.delay_queue_size.set_function(lambda: len(self.delay_queue))
        self.metrics.muted_connections.set_function(lambda: sum(1 for client in self.clients if client.muted))
        self.upstream_reachable = False
        self.admin_http: AdminHttpServer | None = None
        self.usage: UsageRecorder | None = None
        self.proxy_id = config.usage.proxy_id or socket.gethostname()
        # Wall-clock epoch ms for usage records, from the loop clock without a syscall per record.
        self._wall_offset = time.time() - self.loop.time()
        self.topic_guard = TopicThresholdGuard(
            config.topic_thresholds, config.windows.burst_seconds(QuotaKey.PRODUCER_BYTE_RATE), bucket_factory
        )
        self.brokers: dict[int, tuple[str, int]] = {}  # node id -> the broker's own address
        self.listener_ports: dict[int, int] = {}  # node id -> proxy port serving it
        self.topics = TopicCatalog()
        self.rewriters = response_rewriters()
        self.clients: set[ClientConnection] = set()
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._discovery_correlation_id = 0
        self._stopped = asyncio.Event()

    # addresses -------------------------------------------------------------------------------
    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """Records broker node_id's real address; returns the proxy address clients must use."""
        if self.brokers.get(node_id) != (host, port):
            if node_id in self.brokers:
                log.info("broker %d moved from %s:%d to %s:%d", node_id, *self.brokers[node_id], host, port)
            self.brokers[node_id] = (host, port)
        if node_id not in self.listener_ports:
            self._open_broker_listener(node_id)
        return self.config.proxy.advertised_host, self.config.proxy.broker_port(node_id)

    def observe_topics(self, topics: Iterable[tuple[str, Any, int]]) -> None:
        self.topics.observe(topics)

    def _open_broker_listener(self, node_id: int) -> None:
        port = self.config.proxy.broker_port(node_id)
        self.listener_ports[node_id] = port
        if not 0 < port < 65536:
            log.error("broker %d would be served on port %d: lower proxy.broker_port_base", node_id, port)
            return
        try:
            sock = bind_listening_socket(self.config.proxy.listen_host, port, self.config.proxy.workers > 1)
        except OSError as exc:
            log.error("cannot listen for broker %d on port %d: %s", node_id, port, exc)
            return
        name = f"broker-{node_id}"
        log.info("serving broker %d (%s:%d) on port %d", node_id, *self.brokers[node_id], port)
        self._spawn(self._serve(sock, name, lambda: [self.brokers[node_id]]))

    # lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        proxy = self.config.proxy
        sock = bind_listening_socket(proxy.listen_host, proxy.port, proxy.workers > 1)
        log.info("bootstrap listener on %s:%d -> %s", proxy.listen_host, proxy.port, proxy.bootstrap_servers)
        await self._serve(sock, BOOTSTRAP, lambda: list(proxy.bootstrap_servers))
        if not await self.refresh_metadata():
            log.warning("no bootstrap server answered yet; brokers will be discovered when one does")
        self._spawn(self._refresh_periodically())
        if self.shared_quotas is not None:
            self._spawn(self.shared_quotas.run())
        usage = self.config.usage
        if usage.enabled:
            servers = [f"{host}:{port}" for host, port in self.config.proxy.bootstrap_servers]
            self.usage = UsageRecorder(usage, self.metrics, make_sink(usage, self.proxy_id, servers))
            self._spawn(self.usage.run())
            log.info("usage records: %s", usage.directory if usage.sink == "jsonl" else f"topic {usage.kafka_topic}")

    async def start_admin_http(self) -> None:
        """Serves /metrics, /healthz, /readyz and /quotas on the metrics port."""
        metrics = self.config.metrics
        port = metrics.port + self.worker  # one endpoint per worker (see docs/scaling.md)
        self.admin_http = AdminHttpServer(self)
        await self.admin_http.start(metrics.host, port)
        log.info("metrics on http://%s:%d/metrics (also /healthz, /readyz, /quotas)", metrics.host, port)

    def readiness_problems(self) -> list[str]:
        problems = []
        if not self._servers:
            problems.append("no listener is up")
        if not self.upstream_reachable:
            problems.append("no bootstrap server reachable at the last metadata refresh")
        return problems

    async def _serve(self, sock: socket.socket, name: str, upstreams: Callable[[], list[tuple[str, int]]]) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: ClientConnection(self, name, upstreams()), sock=sock)
        self._servers.append(server)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def wall_ms(self, loop_time: float) -> int:
        return int((loop_time + self._wall_offset) * 1000)

    def session_services(self) -> SessionServices:
        """What a new connection's session decides with (usage is known once the proxy started)."""
        return SessionServices(
            self.engine,
            self.topic_guard,
            self.topics,
            self.metrics,
            self.entity_metrics,
            self.rewriters,
            self,
            self.usage,
            self.wall_ms,
            self.config.proxy.max_frame_size,
        )

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for client in list(self.clients):
            client.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)  # lets the usage task flush
        for server in self._servers:
            await server.wait_closed()
        if self.shared_quotas is not None:
            await self.shared_quotas.close()  # gives the unused leases back
        if self.admin_http is not None:
            await self.admin_http.stop()
        self._stopped.set()

    def _spawn(self, coro: object) -> None:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def apply_config(self, config: Config) -> None:
        """Applies a reloaded configuration: quotas live, listener and metrics settings at restart."""
        restart_only = (config.proxy, config.metrics, config.cluster)
        if restart_only != (self.config.proxy, self.config.metrics, self.config.cluster):
            log.warning("[proxy], [metrics] and [cluster] changes take effect at the next restart; quotas apply now")
        now = self.loop.time()
        self.engine.update(config.quotas, config.windows, now)
        self.topic_guard.update(config.topic_thresholds, config.windows.burst_seconds(QuotaKey.PRODUCER_BYTE_RATE), now)
        self.config = dataclasses.replace(
            self.config, quotas=config.quotas, windows=config.windows, topic_thresholds=config.topic_thresholds
        )

    def watch_config(self, path: str) -> ConfigWatcher:
        """Reloads `path` when it changes (and when the returned watcher's reload() is called)."""

        def count(ok: bool) -> None:
            self.metrics.config_reloads_total.labels("applied" if ok else "rejected").inc()

        watcher = ConfigWatcher(path, self.apply_config, count)
        self._spawn(watcher.watch())
        return watcher

    # bookkeeping for connections ---------------------------------------------------------------
    def connection_opened(self, client: ClientConnection) -> None:
        self.clients.add(client)
        self.metrics.connections.labels(client.listener).inc()
        self.metrics.connections_total.labels(client.listener).inc()

    def connection_closed(self, client: ClientConnection) -> None:
        self.clients.discard(client)
        self.metrics.connections.labels(client.listener).dec()

    # discovery ---------------------------------------------------------------------------------
    async def refresh_metadata(self) -> bool:
        """Asks one broker for the brokers and topics; opens listeners for new brokers."""
        candidates = list(self.config.proxy.bootstrap_servers) + list(self.brokers.values())
        for host, port in dict.fromkeys(candidates):
            try:
                brokers, topics = await self._fetch_metadata(host, port)
            except asyncio.IncompleteReadError as exc:
                # The broker took the connection but would not answer: a SASL listener wants
                # authentication first. It is up; brokers are then learned from clients' metadata.
                log.debug("metadata refresh from %s:%d unanswered: %s", host, port, exc)
                self._set_upstream_reachable(True)
                return False
            except (OSError, TimeoutError, FrameError) as exc:
                log.debug("metadata refresh from %s:%d failed: %s", host, port, exc)
                continue
            for node_id, broker_host, broker_port in brokers:
                self.advertise(node_id, broker_host, broker_port)
            self.topics.observe(topics)
            self._set_upstream_reachable(True)
            return True
        self._set_upstream_reachable(False)
        return False

    def _set_upstream_reachable(self, reachable: bool) -> None:
        self.upstream_reachable = reachable
        self.metrics.upstream_up.set(1 if reachable else 0)

    async def _fetch_metadata(
        self, host: str, port: int
    ) -> tuple[list[tuple[int, str, int]], list[tuple[str, Any, int]]]:
        timeout = self.config.proxy.connect_timeout_seconds
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        try:
            self._discovery_correlation_id += 1
            correlation_id = self._discovery_correlation_id
            writer.write(encode_discovery_request(correlation_id))
            size = await asyncio.wait_for(reader.readexactly(4), timeout)
            body = await asyncio.wait_for(reader.readexactly(int.from_bytes(size, "big")), timeout)
            return decode_discovery(size + body, correlation_id)
        finally:
            writer.close()

    async def _refresh_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.config.proxy.metadata_refresh_seconds)
            await self.refresh_metadata()
