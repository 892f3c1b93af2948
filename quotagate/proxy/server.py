"""The proxy's composition root: it makes the parts of one proxy process, wires them together and
runs them, and decides nothing itself.

- the quotas (`engine`, `quota_admin`, `shared_quotas`, `topic_guard`): the file's and the Admin
  API's, one engine for every listener, leased from Redis when processes share them; `levels`
  (bucket_levels.py), a lone process's bucket levels across restarts;
- `listeners` (listeners.py): the bootstrap listener and one per broker; a listener whose brokers
  are down stops accepting; `handshakes`, failed TLS handshakes counted and logged at a bounded rate;
- `discovery` (broker_discovery.py): the proxy's own Metadata and ApiVersions requests: brokers,
  topics, readiness, whether SASL comes first;
- `upstream` (upstream.py): how every connection to a broker is opened: sessions, discovery, the
  probe, a paused listener's retry;
- `admission` (admission.py): Kafka's connection limits at accept and while idle; the admitted clients;
- `reloads` (config/reload.py): what a reload applies, as RELOAD_RULES says, one applier per section;
- `usage` (usage.py): the usage recorder, told when the quotas in force change;
- `supervisor` (supervisor.py): every background task, restarted when it fails.

Each connection pair sees the proxy only through `connection.ConnectionContext`, the HTTP endpoints
through `admin_http.AdminContext`, and each session through the `SessionServices` made here: the
tests hand them small doubles instead.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterable
from pathlib import Path

from quotagate.config import Config
from quotagate.config.quota_state import levels_path, load_state
from quotagate.config.reload import DEFAULT_POLL_SECONDS, ConfigWatcher, ReloadApplier
from quotagate.protocol.rewrite import response_rewriters
from quotagate.proxy.admin_http import AdminHttpServer
from quotagate.proxy.admission import Admission
from quotagate.proxy.broker_directory import BrokerDirectory
from quotagate.proxy.broker_discovery import BrokerDiscovery
from quotagate.proxy.bucket_levels import BucketLevelStore
from quotagate.proxy.cluster import SharedQuotas
from quotagate.proxy.connection import ClientConnection
from quotagate.proxy.connection_limits import LimitSettings
from quotagate.proxy.delay_queue import DelayQueue
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.flow_control import ByteBudget
from quotagate.proxy.listeners import HandshakeFailureLog, Listeners
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.quota_admin import QuotaAdmin, StateWriter
from quotagate.proxy.session import SessionServices
from quotagate.proxy.supervisor import Supervisor, TaskFactory
from quotagate.proxy.topics import TopicCatalog
from quotagate.proxy.upstream import Upstream
from quotagate.proxy.usage import QuotasInForce, UsageRecorder, make_sink, writer_id
from quotagate.quotas import QuotaEngine, QuotaKey, QuotaTable
from quotagate.quotas.engine import local_bucket
from quotagate.quotas.topic_thresholds import TopicThresholdGuard
from quotagate.security.tls import ListenerTls, TlsContexts

log = logging.getLogger("quotagate.proxy")

# Per-entity state that no decision needs any more is dropped this often: quota buckets unused for
# BUCKET_IDLE_SECONDS that are full again (a full bucket decides exactly as a fresh one), and
# entity metrics unseen for an hour (folded into user="other"). Random client ids then cost memory
# for a minute, not for the life of the process.
STATE_EXPIRY_SECONDS = 30.0
BUCKET_IDLE_SECONDS = 60.0
SHUTDOWN_POLL_SECONDS = 0.02


class Proxy:
    """One proxy process's parts (the table above). The connection glue and the HTTP endpoints see
    it only through the narrow interfaces they declare (`connection.ConnectionContext`,
    `admin_http.AdminContext`)."""

    # What an accepted connection is: the loaded build's glue (tests run the other build's too).
    client_class: type[ClientConnection] = ClientConnection

    def __init__(
        self, config: Config, metrics: ProxyMetrics | None = None, state_path: Path | None = None, worker: int = 0
    ) -> None:
        """`state_path`: the file keeping quotas set through AlterClientQuotas (None: memory only).
        `worker`: this process's number among proxy.workers."""
        self.config = config
        self.worker = worker  # 0..workers-1: which of this host's worker processes this is
        self.metrics = metrics or ProxyMetrics()
        self.loop = asyncio.get_running_loop()
        # Every background task (named in docs/architecture.md), kept running by the supervisor.
        self.supervisor = Supervisor(self._background_task_failed, self._cannot_go_on)
        self.exit_code = 0  # what `quotagate run` exits with once stopped
        self._stopped = asyncio.Event()
        self._stopping = False

        # The quotas. Several processes (workers, replicas) share them: the buckets are leased from
        # Redis, or hold 1/N of each quota without it. One process alone keeps plain local buckets.
        self.shared_quotas = (
            SharedQuotas(config.cluster, config.processes, self.metrics, self.loop.time)
            if config.shares_quotas
            else None
        )
        bucket_factory = self.shared_quotas.bucket if self.shared_quotas else local_bucket
        # The file's quotas combined with those set through Kafka's admin APIs (kafka-configs.sh).
        self.quota_admin = QuotaAdmin(
            config.quotas,
            load_state(state_path) if state_path is not None else {},
            alter_principals=config.admin.alter_principals,
            state_path=state_path,
            apply=self._quotas_altered,
            describe_access=config.admin.describe_access,
            max_decoded_elements=config.proxy.max_decoded_elements,
            # Written in a worker thread, alters arriving together in one write; each answered once durable.
            writer=StateWriter(state_path, self.loop) if state_path is not None else None,
        )
        # One engine and one delay queue for every listener: an entity's connections to all the
        # brokers draw on the same buckets, so quotas hold for the cluster.
        self.engine = QuotaEngine(self.quota_admin.quotas, config.windows, bucket_factory)
        produce_burst = config.windows.burst_seconds(QuotaKey.PRODUCER_BYTE_RATE)
        self.topic_guard = TopicThresholdGuard(config.topic_thresholds, produce_burst, bucket_factory)
        self.levels = (
            BucketLevelStore(levels_path(state_path), self.engine, self.metrics, self.loop.time)
            if state_path is not None and not config.shares_quotas
            else None
        )
        if self.levels is not None:
            self.levels.restore()
        self.delay_queue = DelayQueue(self.loop)
        self.entity_metrics = EntityMetrics(lambda: self.engine, self.loop.time, config.metrics.max_entities)

        # The brokers: where each really is and what clients are told instead (what the rewriters
        # write through), how they are reached, listened for and discovered.
        self.topics = TopicCatalog()
        self.brokers = BrokerDirectory(config.proxy.advertised_host, config.proxy.broker_port, self.topics)
        self.rewriters = response_rewriters()
        self.tls = TlsContexts(config.proxy_tls, config.upstream_tls)  # None on a side that is plaintext
        self.upstream = Upstream(self.tls.upstream, config.proxy.connect_timeout_seconds)
        self.handshakes = HandshakeFailureLog(self.metrics, self.loop.time)
        self.listeners = Listeners(config.proxy, self.brokers, self.upstream, self._accepted, self._spawn)
        self.discovery = BrokerDiscovery(
            config.proxy, self.upstream, self.brokers, self.topics, self.listeners.open_broker_listeners, self.metrics
        )

        # The clients: which are served, and what all their partial frames may hold together.
        self.admission = Admission(
            LimitSettings.from_config(config.proxy, produce_burst), self.engine, self.metrics, self.loop
        )
        self.partial_frames = ByteBudget(config.proxy.partial_frames_max_bytes)

        # Usage records (made at start); wall-clock epoch ms from the loop clock, without a syscall per record.
        self.usage: UsageRecorder | None = None
        self.proxy_id = config.usage.proxy_id or socket.gethostname()
        self.wall_offset = time.time() - self.loop.time()
        self.admin_http: AdminHttpServer | None = None

        self.reloads = ReloadApplier(
            config,
            {
                ("quotas", "tenants", "windows"): self._quotas_reloaded,  # the tenants ride in the quota table
                ("topic_thresholds",): self._thresholds_reloaded,
                ("admin",): lambda running: self.quota_admin.set_access(
                    running.admin.alter_principals, running.admin.describe_access
                ),  # quota_api: read for each connection opened
            },
        )
        self._register_metrics()

    def _register_metrics(self) -> None:
        self.metrics.registry.register(self.entity_metrics)
        self.metrics.delay_queue_size.set_function(lambda: len(self.delay_queue))
        # list(): scrapes render in a worker thread while the loop adds and removes clients.
        self.metrics.muted_connections.set_function(lambda: sum(1 for c in list(self.admission.clients) if c.muted))
        self.metrics.partial_frame_bytes.set_function(lambda: self.partial_frames.used)

    # What the connections see (ConnectionContext) -----------------------------------------------
    def session_services(self) -> SessionServices:
        """What a new connection's session decides with (usage is known once the proxy started)."""
        proxy = self.config.proxy
        require_sasl = self.discovery.require_sasl
        return SessionServices(
            engine=self.engine,
            topic_guard=self.topic_guard,
            topics=self.topics,
            metrics=self.metrics,
            entity_metrics=self.entity_metrics,
            rewriters=self.rewriters,
            cluster=self.brokers,
            usage=self.usage,
            wall_offset=self.wall_offset,
            max_frame_size=proxy.max_frame_size,
            quota_admin=self.quota_admin if self.config.admin.quota_api == "proxy" else None,
            principal_claim=proxy.oauthbearer_principal_claim,
            sasl_max_receive_size=proxy.sasl_server_max_receive_size if require_sasl is not False else None,
            sasl_required=require_sasl,
            partial_frames=self.partial_frames,
            partial_frame_share=proxy.partial_frames_max_bytes_per_connection,
            max_decoded_elements=proxy.max_decoded_elements,
        )

    def connection_opened(self, client: ClientConnection) -> bool:
        return self.admission.opened(client)

    def connection_closed(self, client: ClientConnection) -> None:
        self.admission.closed(client)

    def upstream_unreachable(self, listener: str) -> None:
        self.listeners.upstream_unreachable(listener)

    def open_broker_listeners(self, node_ids: Iterable[int]) -> None:
        self.listeners.open_broker_listeners(node_ids)

    def _accepted(self, listener: str, upstreams: list[tuple[str, int]]) -> asyncio.BaseProtocol:
        client = self.client_class(self, listener, upstreams)
        tls = self.tls.listener
        # TLS by ListenerTls, not the loop's: a failed handshake then sends its alert (issue 26).
        return client if tls is None else ListenerTls(self.loop, client, tls, self.handshakes.failed)

    # What the HTTP endpoints see (AdminContext) --------------------------------------------------
    @property
    def clients(self) -> set[ClientConnection]:
        """The admitted client connections (/quotas counts the muted ones by entity)."""
        return self.admission.clients

    def readiness_problems(self) -> list[str]:
        problems = []
        if not self.listeners.up:
            problems.append("no listener is up")
        if not self.discovery.reachable:
            problems.append("no bootstrap server reachable at the last metadata refresh or readiness probe")
        return problems

    # Lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.listeners.start_bootstrap()
        if not await self.discovery.refresh_metadata():
            log.warning("no bootstrap server answered yet; brokers will be discovered when one does")
        self._spawn("metadata-refresh", self.discovery.refresh_periodically)
        self._spawn("state-expiry", self._expire_idle_state_periodically)
        self._spawn("idle-connections", self.admission.close_idle_periodically)
        self._spawn("readiness-probe", self.discovery.probe_periodically)
        if self.levels is not None:
            self._spawn("bucket-levels", self.levels.save_periodically)
        if self.tls.listener is not None or self.tls.upstream is not None:
            self._spawn("certificate-watch", self._watch_certificates)
        if self.shared_quotas is not None:
            self._spawn("shared-quotas", self.shared_quotas.run)
        usage = self.config.usage
        if usage.enabled:
            servers = [f"{host}:{port}" for host, port in self.config.proxy.bootstrap_servers]
            writer = writer_id(self.proxy_id)
            self.usage = UsageRecorder(
                usage,
                self.metrics,
                make_sink(usage, writer, servers, self.tls.upstream),
                self.proxy_id,
                writer,
                QuotasInForce(self.engine.table, self.engine.windows),
            )
            self._spawn("usage-records", self.usage.run)
            where = f"topic {usage.kafka_topic}" if usage.sink == "kafka" else usage.directory
            log.info("usage records (%s, %s): %s", usage.records, usage.sink, where)

    async def start_admin_http(self) -> None:
        """Serves /metrics, /healthz, /readyz and /quotas on the metrics port."""
        metrics = self.config.metrics
        port = metrics.worker_port(self.worker)  # one endpoint per worker (see docs/scaling.md)
        self.admin_http = AdminHttpServer(self)
        await self.admin_http.start(metrics.host, port)
        log.info("metrics on http://%s:%d/metrics (also /healthz, /readyz, /quotas)", metrics.host, port)

    async def stop(self) -> None:
        """Graceful shutdown: stop accepting and reading requests, let the requests already
        forwarded be answered (up to shutdown_timeout_seconds), close every connection after what
        was written to it, flush usage records, then stop."""
        if self._stopping:
            return
        self._stopping = True
        self.listeners.close()
        clients = list(self.admission.clients)
        for client in clients:
            client.flow.pause("shutdown")
        deadline = self.loop.time() + self.config.proxy.shutdown_timeout_seconds
        waiting = sum(len(client.session.in_flight) for client in clients)
        log.info("shutting down: %d connections, %d requests in flight", len(clients), waiting)
        while self.loop.time() < deadline and any(c.session.awaiting_answers for c in self.admission.clients):
            await asyncio.sleep(SHUTDOWN_POLL_SECONDS)
        unanswered = sum(len(client.session.in_flight) for client in self.admission.clients)
        if unanswered:
            log.warning("shutdown_timeout_seconds passed with %d requests unanswered; closing", unanswered)
        for client in list(self.admission.clients):
            client.close()
        if self.levels is not None:
            self.levels.save()
        await self.supervisor.cancel_all()  # lets the usage task flush
        await self.listeners.wait_closed()
        if self.shared_quotas is not None:
            await self.shared_quotas.close()  # gives the unused leases back
        if self.admin_http is not None:
            await self.admin_http.stop()
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def _spawn(self, name: str, run: TaskFactory, restart: bool = True) -> None:
        """Runs a background task under the supervisor (logged, counted and restarted if it fails)."""
        self.supervisor.start(name, run, restart)

    def _background_task_failed(self, name: str) -> None:
        self.metrics.background_task_failures_total.labels(name).inc()

    def _cannot_go_on(self, name: str) -> None:
        """A task the proxy cannot run without failed for good: the process stops with exit code 1."""
        self.exit_code = 1
        self._stopped.set()

    # Reloads and quota changes ------------------------------------------------------------------
    def apply_config(self, config: Config) -> None:
        """Applies a reloaded configuration as config.reload.RELOAD_RULES says (`reloads`); the
        watcher logs the keys that wait for a restart. Certificate files are read again (a SIGHUP
        lands here too)."""
        self.config = self.reloads.apply(config)
        self.tls.reload()

    def _quotas_reloaded(self, running: Config) -> None:
        now = self.loop.time()
        self.engine.update(self.quota_admin.file_changed(running.quotas), running.windows, now)
        self._quotas_changed(now)

    def _thresholds_reloaded(self, running: Config) -> None:
        burst = running.windows.burst_seconds(QuotaKey.PRODUCER_BYTE_RATE)
        self.topic_guard.update(running.topic_thresholds, burst, self.loop.time())

    def _quotas_altered(self, quotas: QuotaTable, now: float) -> None:
        """AlterClientQuotas changed the quotas in force: applied live, as a file reload is."""
        self.engine.update(quotas, self.engine.windows, now)
        self._quotas_changed(now)

    def _quotas_changed(self, now: float) -> None:
        """The quotas in force changed: usage rows name them from now on (wall-clock epoch ms, as the
        records' times), and open connections take up (or drop) the policies they call for
        (producer_ids_rate)."""
        if self.usage is not None:
            at_ms = int((now + self.wall_offset) * 1000)
            self.usage.quotas_changed(self.engine.table, at_ms, self.engine.windows)
        for client in list(self.admission.clients):
            client.session.quotas_changed()

    def watch_config(self, path: str) -> ConfigWatcher:
        """Reloads `path` when it changes (and when the returned watcher's reload() is called)."""

        def count(ok: bool) -> None:
            self.metrics.config_reloads_total.labels("applied" if ok else "rejected").inc()

        watcher = ConfigWatcher(path, self.apply_config, count, started=self.config)
        self.metrics.config_restart_pending_keys.set_function(lambda: len(watcher.last_report.restart))
        self._spawn("config-watch", watcher.watch)
        return watcher

    # Periodic upkeep ----------------------------------------------------------------------------
    def expire_idle_state(self, now: float) -> tuple[int, int]:
        """Drops idle full buckets and idle entity metrics; returns how many of each."""
        return self.engine.expire_idle(now, BUCKET_IDLE_SECONDS), self.entity_metrics.expire_idle(now)

    async def _expire_idle_state_periodically(self) -> None:
        while True:
            await asyncio.sleep(STATE_EXPIRY_SECONDS)
            self.expire_idle_state(self.loop.time())

    async def _watch_certificates(self) -> None:
        """Reads the certificate files again when one changes (a renewal written in place or renamed over)."""
        while True:
            await asyncio.sleep(DEFAULT_POLL_SECONDS)
            if self.tls.changed():
                self.tls.reload()
