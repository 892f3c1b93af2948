"""The proxy: a bootstrap listener, one listener per broker, and broker discovery.

Broker listeners: node N is served on `broker_port_base + N`. A listener is opened the first time a
broker is named, by the proxy's own metadata refresh or by any response the proxy rewrites, and its
socket is bound and listening before the rewritten response leaves, so a client can never be told
a port that is not accepting yet. The rewrite itself binds nothing: `BrokerDirectory` reports the
node ids it sees for the first time, a session passes them on as its `brokers_seen` output, and the
connection glue calls `open_broker_listeners` with them before it writes the response.

Listeners stay open when a broker disappears from metadata (a restarting broker comes back under
the same id); connecting to a broker that is down closes the client's connection, and the client
retries as it would against the broker itself.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from quotagate.config import Config
from quotagate.config.quota_state import levels_path, load_levels, load_state, save_levels
from quotagate.config.reload import DEFAULT_POLL_SECONDS, ConfigWatcher
from quotagate.protocol.discovery import (
    decode_discovery,
    encode_discovery_request,
    encode_probe_request,
    is_probe_answer,
)
from quotagate.protocol.framing import FrameError
from quotagate.protocol.rewrite import response_rewriters
from quotagate.proxy.admin_http import AdminHttpServer
from quotagate.proxy.broker_directory import BrokerDirectory
from quotagate.proxy.cluster import SharedQuotas
from quotagate.proxy.connection import ClientConnection
from quotagate.proxy.connection_limits import REFUSED, ConnectionLimits, LimitSettings
from quotagate.proxy.delay_queue import DelayQueue
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.flow_control import ByteBudget
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.quota_admin import QuotaAdmin, StateWriter
from quotagate.proxy.session import SessionServices
from quotagate.proxy.supervisor import Supervisor, TaskFactory
from quotagate.proxy.topics import TopicCatalog
from quotagate.proxy.upstream import Unanswered, Upstream
from quotagate.proxy.usage import QuotasInForce, UsageRecorder, make_sink, writer_id
from quotagate.quotas import QuotaEngine, QuotaKey, QuotaTable
from quotagate.quotas.engine import local_bucket
from quotagate.quotas.topic_thresholds import TopicThresholdGuard
from quotagate.security.tls import ListenerTls, TlsContexts

log = logging.getLogger("quotagate.proxy")

BOOTSTRAP = "bootstrap"
# Per-entity state that no decision needs any more is dropped this often: quota buckets unused for
# BUCKET_IDLE_SECONDS that are full again (a full bucket decides exactly as a fresh one), and
# entity metrics unseen for an hour (folded into user="other"). Random client ids then cost memory
# for a minute, not for the life of the process.
STATE_EXPIRY_SECONDS = 30.0
BUCKET_IDLE_SECONDS = 60.0
LEVELS_SAVE_SECONDS = 5.0
# Idle connections are looked for every quarter of connections_max_idle_ms, at most this far apart.
IDLE_CHECK_MAX_SECONDS = 5.0
SHUTDOWN_POLL_SECONDS = 0.02
# A listener whose brokers are down retries them after this long, doubling up to the maximum
# (the range of Kafka clients' reconnect.backoff.ms / reconnect.backoff.max.ms defaults).
LISTENER_RETRY_MIN_SECONDS = 0.05
LISTENER_RETRY_MAX_SECONDS = 1.0
# Failed TLS handshakes are logged at most this often per reason (a scanner can fail thousands).
TLS_FAILURE_LOG_SECONDS = 10.0


def bind_listening_socket(host: str, port: int, backlog: int, reuse_port: bool = False) -> socket.socket:
    """reuse_port: several worker processes listen on the port and the kernel spreads connections."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=backlog, reuse_port=reuse_port)
    sock.setblocking(False)
    return sock


class Proxy:
    """The listeners, the shared quota state and the background tasks of one proxy process. The
    connection glue and the HTTP endpoints see it only through the narrow interfaces they declare
    (`connection.ConnectionContext`, `admin_http.AdminContext`)."""

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
        # Several processes (workers, replicas) share the quotas: the buckets are leased from Redis,
        # or hold 1/N of each quota without it. One process alone keeps plain local buckets.
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
            config.admin.alter_principals,
            state_path,
            self._quotas_altered,
            config.admin.describe_access,
            config.proxy.max_decoded_elements,
            # Written in a worker thread, alters arriving together in one write; each answered once durable.
            StateWriter(state_path, self.loop) if state_path is not None else None,
        )
        # One engine and one delay queue for every listener: an entity's connections to all the
        # brokers draw on the same buckets, so quotas hold for the cluster.
        self.engine = QuotaEngine(self.quota_admin.quotas, config.windows, bucket_factory)
        # A process alone keeps its buckets' levels beside the state file, so that a restart does not
        # forgive debts (shared buckets live in Redis). Saved periodically and at stop, never per request.
        self.levels_path = levels_path(state_path) if state_path is not None and not config.shares_quotas else None
        self._levels_saved = self.levels_path is not None and self.levels_path.exists()
        if self.levels_path is not None:
            self._restore_levels(self.levels_path)
        self.delay_queue = DelayQueue(self.loop)
        self.entity_metrics = EntityMetrics(lambda: self.engine, self.loop.time, config.metrics.max_entities)
        self.metrics.registry.register(self.entity_metrics)
        self.metrics.delay_queue_size.set_function(lambda: len(self.delay_queue))
        # list(): scrapes render in a worker thread while the loop adds and removes clients.
        self.metrics.muted_connections.set_function(lambda: sum(1 for client in list(self.clients) if client.muted))
        self.upstream_reachable = False
        self.admin_http: AdminHttpServer | None = None
        self.usage: UsageRecorder | None = None
        self.proxy_id = config.usage.proxy_id or socket.gethostname()
        # Wall-clock epoch ms for usage records, from the loop clock without a syscall per record.
        self._wall_offset = time.time() - self.loop.time()
        self.topic_guard = TopicThresholdGuard(
            config.topic_thresholds, config.windows.burst_seconds(QuotaKey.PRODUCER_BYTE_RATE), bucket_factory
        )
        self.topics = TopicCatalog()
        # Where each broker really is, and what clients are told instead: what the rewriters write through.
        self.brokers = BrokerDirectory(config.proxy.advertised_host, config.proxy.broker_port, self.topics)
        self.listener_ports: dict[int, int] = {}  # node id -> proxy port serving it
        self.rewriters = response_rewriters()
        # TLS to the clients and to the brokers (None on a side that is plaintext).
        self.tls = TlsContexts(config.proxy_tls, config.upstream_tls)
        # How every connection to a broker is opened: sessions, discovery, the readiness probe.
        self.upstream = Upstream(self.tls.upstream, config.proxy.connect_timeout_seconds)
        self.clients: set[ClientConnection] = set()
        self._servers: list[asyncio.Server] = []
        # listener name -> (its server, its port, where its clients go)
        self._listeners: dict[str, tuple[asyncio.Server, int, Callable[[], list[tuple[str, int]]]]] = {}
        self._paused_listeners: set[str] = set()  # not accepting: no broker behind them answers
        # Every background task (named in docs/architecture.md), kept running by the supervisor.
        self.supervisor = Supervisor(self._background_task_failed, self._cannot_go_on)
        self.exit_code = 0  # what `quotagate run` exits with once stopped
        self._tls_failures_logged: dict[str, tuple[float, int]] = {}  # reason -> (last logged, since)
        self._discovery_correlation_id = 0
        self._stopped = asyncio.Event()
        self._stopping = False
        self.limits = ConnectionLimits(
            LimitSettings.from_config(config.proxy, config.windows.burst_seconds(QuotaKey.PRODUCER_BYTE_RATE)),
            self.loop.time(),
        )
        self._client_addresses: dict[ClientConnection, str] = {}  # admitted clients -> their address
        # What all clients' partial frames may hold together, and whether the brokers' listener wants
        # SASL first (sasl_server_max_receive_size applies then); "auto" learns it from the brokers.
        self.partial_frames = ByteBudget(config.proxy.partial_frames_max_bytes)
        self.metrics.partial_frame_bytes.set_function(lambda: self.partial_frames.used)
        # None: not known yet (client_sasl = "auto"), taken as required meanwhile.
        self.brokers_require_sasl: bool | None = {"required": True, "none": False}.get(config.proxy.client_sasl)

    # addresses -------------------------------------------------------------------------------
    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """The proxy's own discovery: records broker node_id's real address, has its listener bound if
        it is new, and returns the proxy address clients must use."""
        address = self.brokers.advertise(node_id, host, port)
        self.open_broker_listeners(self.brokers.take_seen())
        return address

    def open_broker_listeners(self, node_ids: Iterable[int]) -> None:
        """Binds a listener for each broker not served yet (the socket listens when this returns)."""
        for node_id in node_ids:
            if node_id not in self.listener_ports:
                self._open_broker_listener(node_id)

    def _open_broker_listener(self, node_id: int) -> None:
        port = self.config.proxy.broker_port(node_id)
        self.listener_ports[node_id] = port
        if not 0 < port < 65536:
            log.error("broker %d would be served on port %d: lower proxy.broker_port_base", node_id, port)
            return
        if not self.config.proxy.expects_node(node_id):
            log.warning(
                "broker %d is outside proxy.broker_node_ids %s: its port %d was not checked against the other "
                "ports; widen the range",
                node_id, list(self.config.proxy.broker_node_ids), port,
            )  # fmt: skip
        name = f"broker-{node_id}"
        sock = self._bind(name, port)
        if sock is None:
            return
        addresses = self.brokers.addresses
        log.info("serving broker %d (%s:%d) on port %d", node_id, *addresses[node_id], port)
        self._spawn(name, lambda: self._serve(sock, name, lambda: [addresses[node_id]]))

    def _bind(self, listener: str, port: int) -> socket.socket | None:
        """A listening socket on listen_host:port for `listener`, or None (logged) if the port is taken."""
        try:
            proxy = self.config.proxy
            return bind_listening_socket(proxy.listen_host, port, proxy.socket_listen_backlog_size, proxy.workers > 1)
        except OSError as exc:
            log.error("%s: cannot listen on port %d: %s", listener, port, exc)
            return None

    # lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        proxy = self.config.proxy
        sock = bind_listening_socket(proxy.listen_host, proxy.port, proxy.socket_listen_backlog_size, proxy.workers > 1)
        log.info("bootstrap listener on %s:%d -> %s", proxy.listen_host, proxy.port, proxy.bootstrap_servers)
        await self._serve(sock, BOOTSTRAP, lambda: list(proxy.bootstrap_servers))
        if not await self.refresh_metadata():
            log.warning("no bootstrap server answered yet; brokers will be discovered when one does")
        self._spawn("metadata-refresh", self._refresh_periodically)
        self._spawn("state-expiry", self._expire_idle_state_periodically)
        self._spawn("idle-connections", self._close_idle_periodically)
        self._spawn("readiness-probe", self._probe_periodically)
        if self.levels_path is not None:
            self._spawn("bucket-levels", self._save_levels_periodically)
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

    def readiness_problems(self) -> list[str]:
        problems = []
        if not self._servers:
            problems.append("no listener is up")
        if not self.upstream_reachable:
            problems.append("no bootstrap server reachable at the last metadata refresh or readiness probe")
        return problems

    async def _serve(self, sock: socket.socket, name: str, upstreams: Callable[[], list[tuple[str, int]]]) -> None:
        loop = asyncio.get_running_loop()
        tls = self.tls.listener

        def accepted() -> asyncio.BaseProtocol:
            client = self.client_class(self, name, upstreams())
            # TLS by ListenerTls, not the loop's: a failed handshake then sends its alert (issue 26).
            return client if tls is None else ListenerTls(loop, client, tls, self.tls_handshake_failed)

        # create_server listens again on the socket, with its own default backlog (100) unless told.
        server = await loop.create_server(accepted, sock=sock, backlog=self.config.proxy.socket_listen_backlog_size)
        self._servers.append(server)
        self._listeners[name] = (server, sock.getsockname()[1], upstreams)

    def tls_handshake_failed(self, reason: str, peer: str) -> None:
        """A client's TLS handshake failed (its alert was sent): counted by reason, logged at most
        once per TLS_FAILURE_LOG_SECONDS per reason with how many went unlogged."""
        self.metrics.tls_handshake_failures_total.labels(reason).inc()
        now = self.loop.time()
        last, unlogged = self._tls_failures_logged.get(reason, (-TLS_FAILURE_LOG_SECONDS, 0))
        if now - last < TLS_FAILURE_LOG_SECONDS:
            self._tls_failures_logged[reason] = (last, unlogged + 1)
            return
        self._tls_failures_logged[reason] = (now, 0)
        log.warning(
            "TLS handshake with client %s failed: %s%s", peer, reason,
            f" ({unlogged} more since the last such message)" if unlogged else "",
        )  # fmt: skip

    def upstream_unreachable(self, listener: str) -> None:
        """No broker behind `listener` took a client's connection. Without the proxy the client's
        connect would have been refused and its reconnect backoff would apply; accepting and then
        closing defeats that (kafka-python: 64 000 reconnects in 20 s). So the listener stops
        accepting until a broker behind it takes a connection again: clients get connection refused."""
        entry = self._listeners.get(listener)
        if entry is None or self._stopping or listener in self._paused_listeners:
            return
        server, port, upstreams = entry
        self._paused_listeners.add(listener)
        server.close()
        self._servers.remove(server)
        log.warning(
            "%s: no broker reachable (%s); not accepting on port %d until one is",
            listener,
            ", ".join(f"{host}:{p}" for host, p in upstreams()),
            port,
        )
        self._spawn(f"{listener}-resume", lambda: self._resume_when_reachable(listener, port, upstreams))

    async def _resume_when_reachable(
        self, listener: str, port: int, upstreams: Callable[[], list[tuple[str, int]]]
    ) -> None:
        wait = LISTENER_RETRY_MIN_SECONDS
        while True:
            await asyncio.sleep(wait)
            wait = min(wait * 2, LISTENER_RETRY_MAX_SECONDS)
            for host, broker_port in upstreams():
                try:
                    transport, _ = await self.upstream.connect(host, broker_port, asyncio.Protocol)
                except (OSError, TimeoutError):
                    continue
                transport.close()
                sock = self._bind(listener, port)
                if sock is None:
                    break
                self._paused_listeners.discard(listener)
                await self._serve(sock, listener, upstreams)
                log.info("%s: broker %s:%d reachable again; accepting on port %d", listener, host, broker_port, port)
                return

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def session_services(self) -> SessionServices:
        """What a new connection's session decides with (usage is known once the proxy started)."""
        return SessionServices(
            self.engine,
            self.topic_guard,
            self.topics,
            self.metrics,
            self.entity_metrics,
            self.rewriters,
            self.brokers,
            self.usage,
            self._wall_offset,
            self.config.proxy.max_frame_size,
            self.quota_admin if self.config.admin.quota_api == "proxy" else None,
            self.config.proxy.oauthbearer_principal_claim,
            self.config.proxy.sasl_server_max_receive_size if self.brokers_require_sasl is not False else None,
            sasl_required=self.brokers_require_sasl,
            partial_frames=self.partial_frames,
            partial_frame_share=self.config.proxy.partial_frames_max_bytes_per_connection,
            max_decoded_elements=self.config.proxy.max_decoded_elements,
        )

    async def stop(self) -> None:
        """Graceful shutdown: stop accepting and reading requests, let the requests already
        forwarded be answered (up to shutdown_timeout_seconds), close every connection after what
        was written to it, flush usage records, then stop."""
        if self._stopping:
            return
        self._stopping = True
        for server in self._servers:
            server.close()
        clients = list(self.clients)
        for client in clients:
            if client.reading is not None:
                client.reading.pause("shutdown")
        deadline = self.loop.time() + self.config.proxy.shutdown_timeout_seconds
        waiting = sum(len(client.session.in_flight) for client in clients)
        log.info("shutting down: %d connections, %d requests in flight", len(clients), waiting)
        while self.loop.time() < deadline and any(client.session.awaiting_answers for client in self.clients):
            await asyncio.sleep(SHUTDOWN_POLL_SECONDS)
        unanswered = sum(len(client.session.in_flight) for client in self.clients)
        if unanswered:
            log.warning("shutdown_timeout_seconds passed with %d requests unanswered; closing", unanswered)
        for client in list(self.clients):
            client.close()
        self.save_levels()
        await self.supervisor.cancel_all()  # lets the usage task flush
        for server in self._servers:
            await server.wait_closed()
        if self.shared_quotas is not None:
            await self.shared_quotas.close()  # gives the unused leases back
        if self.admin_http is not None:
            await self.admin_http.stop()
        self._stopped.set()

    def _spawn(self, name: str, run: TaskFactory, restart: bool = True) -> None:
        """Runs a background task under the supervisor (logged, counted and restarted if it fails)."""
        self.supervisor.start(name, run, restart)

    def _background_task_failed(self, name: str) -> None:
        self.metrics.background_task_failures_total.labels(name).inc()

    def _cannot_go_on(self, name: str) -> None:
        """A task the proxy cannot run without failed for good: the process stops with exit code 1."""
        self.exit_code = 1
        self._stopped.set()

    def apply_config(self, config: Config) -> None:
        """Applies a reloaded configuration: what config.reload.RELOAD_RULES says a reload applies
        (quotas, windows, thresholds, [admin] but its state_file); the watcher logs the keys that wait
        for a restart. Certificate files are read again (a SIGHUP lands here too)."""
        now = self.loop.time()
        self.engine.update(self.quota_admin.file_changed(config.quotas), config.windows, now)
        self._usage_quotas_changed(now)
        self._sessions_follow_quotas()
        self.topic_guard.update(config.topic_thresholds, config.windows.burst_seconds(QuotaKey.PRODUCER_BYTE_RATE), now)
        self.quota_admin.set_access(config.admin.alter_principals, config.admin.describe_access)
        self.config = replace(
            self.config,
            quotas=config.quotas,
            windows=config.windows,
            topic_thresholds=config.topic_thresholds,
            admin=replace(config.admin, state_file=self.config.admin.state_file),  # quota_api: new connections
        )
        self.tls.reload()

    def _quotas_altered(self, quotas: QuotaTable, now: float) -> None:
        """AlterClientQuotas changed the quotas in force: applied live, as a file reload is."""
        self.engine.update(quotas, self.engine.windows, now)
        self._usage_quotas_changed(now)
        self._sessions_follow_quotas()

    def _sessions_follow_quotas(self) -> None:
        """Open connections take up (or drop) the policies the new quotas call for (producer_ids_rate)."""
        for client in list(self.clients):
            client.session.quotas_changed()

    def _usage_quotas_changed(self, now: float) -> None:
        """Usage rows name the quota in force in their interval: tell the recorder when it changed."""
        if self.usage is not None:
            at_ms = int((now + self._wall_offset) * 1000)  # wall-clock epoch ms, as the records' times
            self.usage.quotas_changed(self.engine.table, at_ms, self.engine.windows)

    def watch_config(self, path: str) -> ConfigWatcher:
        """Reloads `path` when it changes (and when the returned watcher's reload() is called)."""

        def count(ok: bool) -> None:
            self.metrics.config_reloads_total.labels("applied" if ok else "rejected").inc()

        watcher = ConfigWatcher(path, self.apply_config, count, started=self.config)
        self.metrics.config_restart_pending_keys.set_function(lambda: len(watcher.last_report.restart))
        self._spawn("config-watch", watcher.watch)
        return watcher

    # bookkeeping for connections ---------------------------------------------------------------
    def connection_opened(self, client: ClientConnection) -> bool:
        """Applies the connection limits to a client just accepted; False if it was closed for them."""
        self.metrics.connections_total.labels(client.listener).inc()
        assert client.transport is not None and client.reading is not None
        peer = client.transport.get_extra_info("peername")
        address = peer[0] if peer else "?"
        now = self.loop.time()
        # issue 28: an ip's connection_creation_rate (KIP-612). Over it, the broker's acceptor closes
        # the connection after the throttle time (Kafka's DelayedCloseSocket); it is never read.
        close_after = self.engine.admit_connection(address, now)
        if close_after > 0:
            self.metrics.connections_refused_total.labels("connection_creation_rate").inc()
            client.closed = True
            self.loop.call_later(close_after, client.transport.close)
            return False
        wait = self.limits.admit(address, now)
        if wait == REFUSED:
            self.metrics.connections_refused_total.labels("max_connections_per_ip").inc()
            log.debug(
                "%s: closing %s: %s has max_connections_per_ip connections", client.listener, client.peer, address
            )
            client.closed = True
            client.transport.close()
            return False
        self._client_addresses[client] = address
        self.clients.add(client)
        self.metrics.connections.labels(client.listener).inc()
        if wait > 0:  # over max_connection_creation_rate: accepted, read once the rate allows
            self.metrics.connections_delayed_total.inc()
            client.hold_reading(wait)
        return True

    def connection_closed(self, client: ClientConnection) -> None:
        address = self._client_addresses.pop(client, None)
        if address is None:
            return  # refused at accept: never counted
        self.limits.release(address)
        self.clients.discard(client)
        self.metrics.connections.labels(client.listener).dec()

    def close_idle_connections(self, now: float) -> int:
        """Closes client connections over which no byte moved for connections_max_idle_ms (a muted
        client is waiting on the proxy, not idle); returns how many."""
        idle = [c for c in self.clients if not c.muted and self.limits.is_idle(c.last_activity, now)]
        for client in idle:
            log.debug("%s: closing %s: idle for connections_max_idle_ms", client.listener, client.peer)
            client.close()
        self.metrics.connections_idle_closed_total.inc(len(idle))
        return len(idle)

    async def _close_idle_periodically(self) -> None:
        period = min(self.limits.settings.max_idle_seconds / 4, IDLE_CHECK_MAX_SECONDS)
        while True:
            await asyncio.sleep(period)
            self.close_idle_connections(self.loop.time())

    # discovery ---------------------------------------------------------------------------------
    async def refresh_metadata(self) -> bool:
        """Asks one broker for the brokers and topics; opens listeners for new brokers."""
        for host, port in self._broker_candidates():
            correlation_id = self._next_correlation_id()
            request = encode_discovery_request(correlation_id)
            try:
                answer = await self.upstream.ask(host, port, request, self.config.proxy.connect_timeout_seconds)
                brokers, topics = decode_discovery(answer, correlation_id)
            except Unanswered as exc:
                # The broker took the connection but would not answer: a SASL listener wants
                # authentication first. It is up; brokers are then learned from clients' metadata.
                log.debug("metadata refresh from %s:%d unanswered: %s", host, port, exc)
                self._learn_client_sasl(True)
                self._set_upstream_reachable(True)
                return False
            except (OSError, TimeoutError, FrameError) as exc:
                log.debug("metadata refresh from %s:%d failed: %r", host, port, exc)
                continue
            self._learn_client_sasl(False)
            for node_id, broker_host, broker_port in brokers:
                self.advertise(node_id, broker_host, broker_port)
            self.topics.observe(topics)
            self._set_upstream_reachable(True)
            return True
        self._set_upstream_reachable(False)
        return False

    def _broker_candidates(self) -> list[tuple[str, int]]:
        """Whom the proxy's own requests go to, in order: the bootstrap servers, then known brokers."""
        return list(dict.fromkeys([*self.config.proxy.bootstrap_servers, *self.brokers.addresses.values()]))

    def _next_correlation_id(self) -> int:
        self._discovery_correlation_id += 1
        return self._discovery_correlation_id

    def _learn_client_sasl(self, required: bool) -> None:
        """With client_sasl = "auto": what the brokers' answer to the proxy's Metadata request says
        (a SASL listener closes it unanswered), for the connections accepted from now on."""
        if self.config.proxy.client_sasl == "auto" and required != self.brokers_require_sasl:
            log.info("the brokers' listener %s SASL", "requires" if required else "does not require")
            self.brokers_require_sasl = required

    def _set_upstream_reachable(self, reachable: bool) -> None:
        self.upstream_reachable = reachable
        self.metrics.upstream_up.set(1 if reachable else 0)

    def expire_idle_state(self, now: float) -> tuple[int, int]:
        """Drops idle full buckets and idle entity metrics; returns how many of each."""
        return self.engine.expire_idle(now, BUCKET_IDLE_SECONDS), self.entity_metrics.expire_idle(now)

    async def _expire_idle_state_periodically(self) -> None:
        while True:
            await asyncio.sleep(STATE_EXPIRY_SECONDS)
            self.expire_idle_state(self.loop.time())

    async def probe_brokers(self) -> bool:
        """Asks the bootstrap servers and known brokers for ApiVersions, one after another, until
        one answers within readiness_timeout_seconds; records and returns whether one did."""
        timeout = self.config.proxy.readiness_timeout_seconds
        for host, port in self._broker_candidates():
            correlation_id = self._next_correlation_id()
            try:
                answer = await self.upstream.ask(host, port, encode_probe_request(correlation_id), timeout)
            except (OSError, TimeoutError, FrameError, Unanswered) as exc:
                log.debug("readiness probe of %s:%d failed: %r", host, port, exc)
                continue
            if not is_probe_answer(answer, correlation_id):
                log.debug("readiness probe of %s:%d: the answer does not match the request", host, port)
                continue
            self._set_upstream_reachable(True)
            return True
        if self.upstream_reachable:
            log.warning("no broker answered ApiVersions within %.1f s: not ready", timeout)
        self._set_upstream_reachable(False)
        return False

    def _restore_levels(self, path: Path) -> None:
        """Puts back the buckets' levels saved by the last process. A file that cannot be read is
        forgiven as a lost one (every bucket starts full), logged and counted: never a failed start."""
        try:
            levels, saved_at = load_levels(path)
        except (OSError, ValueError) as exc:
            self.metrics.bucket_levels_resets_total.inc()
            log.warning("bucket levels not restored from %s, every bucket starts full: %s", path, exc)
            return
        if levels:
            elapsed = time.time() - saved_at
            restored = self.engine.restore(levels, elapsed, self.loop.time())
            log.info("restored %d of %d bucket levels saved %.0f s ago", restored, len(levels), elapsed)

    def save_levels(self) -> None:
        """Writes the local buckets' levels (QuotaEngine.levels) for the next start; a failure is logged."""
        if self.levels_path is None:
            return
        levels = self.engine.levels(self.loop.time())
        if not levels and not self._levels_saved:
            return  # nothing to keep, and nothing kept to replace
        try:
            save_levels(self.levels_path, levels, time.time())
        except OSError as exc:
            log.error("bucket levels not saved to %s: %s", self.levels_path, exc)
            return
        self._levels_saved = bool(levels)

    async def _save_levels_periodically(self) -> None:
        """A crash (no SIGTERM) forgives at most LEVELS_SAVE_SECONDS of use."""
        while True:
            await asyncio.sleep(LEVELS_SAVE_SECONDS)
            self.save_levels()

    async def _probe_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.config.proxy.readiness_probe_seconds)
            await self.probe_brokers()

    async def _watch_certificates(self) -> None:
        """Reads the certificate files again when one changes (a renewal written in place or renamed over)."""
        while True:
            await asyncio.sleep(DEFAULT_POLL_SECONDS)
            if self.tls.changed():
                self.tls.reload()

    async def _refresh_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.config.proxy.metadata_refresh_seconds)
            await self.refresh_metadata()
