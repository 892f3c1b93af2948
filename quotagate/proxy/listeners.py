"""The proxy's listening sockets: the bootstrap listener and one per broker, and what happens to a
listener whose brokers are down. It binds, serves, pauses and closes; what an accepted connection
is, is the caller's (`accept`).

Broker listeners: node N is served on `broker_port_base + N`. A listener is opened the first time a
broker is named, by the proxy's own metadata refresh or by any response the proxy rewrites, and its
socket is bound and listening before the rewritten response leaves, so a client can never be told
a port that is not accepting yet (`open_broker_listeners` returns once they listen).

Listeners stay open when a broker disappears from metadata (a restarting broker comes back under
the same id). When no broker behind a listener takes a client's connection, the listener stops
accepting until one does (`upstream_unreachable`): without the proxy, the client's connect would
have been refused and its reconnect backoff would apply.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Iterable

from quotagate.config.settings import ProxyConfig
from quotagate.proxy.broker_directory import BrokerDirectory
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.supervisor import TaskFactory
from quotagate.proxy.upstream import Upstream

log = logging.getLogger("quotagate.proxy")

BOOTSTRAP = "bootstrap"
# A listener whose brokers are down retries them after this long, doubling up to the maximum
# (the range of Kafka clients' reconnect.backoff.ms / reconnect.backoff.max.ms defaults).
LISTENER_RETRY_MIN_SECONDS = 0.05
LISTENER_RETRY_MAX_SECONDS = 1.0
# Failed TLS handshakes are logged at most this often per reason (a scanner can fail thousands).
TLS_FAILURE_LOG_SECONDS = 10.0

Addresses = Callable[[], list[tuple[str, int]]]  # where a listener's clients go: brokers, in order
# accept(listener name, its brokers' addresses now) -> the protocol of a connection just accepted
Accept = Callable[[str, list[tuple[str, int]]], asyncio.BaseProtocol]
Spawn = Callable[[str, TaskFactory], object]  # runs a background task under the supervisor


def bind_listening_socket(host: str, port: int, backlog: int, reuse_port: bool = False) -> socket.socket:
    """reuse_port: several worker processes listen on the port and the kernel spreads connections."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=backlog, reuse_port=reuse_port)
    sock.setblocking(False)
    return sock


class Listeners:
    """Every listener of one proxy process, by name (`bootstrap`, `broker-N`)."""

    def __init__(
        self, config: ProxyConfig, brokers: BrokerDirectory, upstream: Upstream, accept: Accept, spawn: Spawn
    ) -> None:
        self.config = config
        self.brokers = brokers
        self.upstream = upstream  # how a paused listener tries its brokers again
        self._accept = accept
        self._spawn = spawn
        self.ports: dict[int, int] = {}  # node id -> the port serving it
        self._servers: list[asyncio.Server] = []
        # listener name -> (its server, its port, where its clients go)
        self._serving: dict[str, tuple[asyncio.Server, int, Addresses]] = {}
        self._paused: set[str] = set()  # not accepting: no broker behind them answers
        self._closing = False

    @property
    def up(self) -> bool:
        """Whether any listener accepts connections (readiness)."""
        return bool(self._servers)

    async def start_bootstrap(self) -> None:
        config = self.config
        sock = self._socket(config.port)
        log.info("bootstrap listener on %s:%d -> %s", config.listen_host, config.port, config.bootstrap_servers)
        await self._serve(sock, BOOTSTRAP, lambda: list(config.bootstrap_servers))

    def open_broker_listeners(self, node_ids: Iterable[int]) -> None:
        """Binds a listener for each broker not served yet (the socket listens when this returns)."""
        for node_id in node_ids:
            if node_id not in self.ports:
                self._open_broker_listener(node_id)

    def _open_broker_listener(self, node_id: int) -> None:
        port = self.config.broker_port(node_id)
        self.ports[node_id] = port
        if not 0 < port < 65536:
            log.error("broker %d would be served on port %d: lower proxy.broker_port_base", node_id, port)
            return
        if not self.config.expects_node(node_id):
            log.warning(
                "broker %d is outside proxy.broker_node_ids %s: its port %d was not checked against the other "
                "ports; widen the range",
                node_id, list(self.config.broker_node_ids), port,
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
            return self._socket(port)
        except OSError as exc:
            log.error("%s: cannot listen on port %d: %s", listener, port, exc)
            return None

    def _socket(self, port: int) -> socket.socket:
        config = self.config
        return bind_listening_socket(config.listen_host, port, config.socket_listen_backlog_size, config.workers > 1)

    async def _serve(self, sock: socket.socket, name: str, addresses: Addresses) -> None:
        loop = asyncio.get_running_loop()
        # create_server listens again on the socket, with its own default backlog (100) unless told.
        server = await loop.create_server(
            lambda: self._accept(name, addresses()), sock=sock, backlog=self.config.socket_listen_backlog_size
        )
        self._servers.append(server)
        self._serving[name] = (server, sock.getsockname()[1], addresses)

    def upstream_unreachable(self, listener: str) -> None:
        """No broker behind `listener` took a client's connection. Without the proxy the client's
        connect would have been refused and its reconnect backoff would apply; accepting and then
        closing defeats that (kafka-python: 64 000 reconnects in 20 s). So the listener stops
        accepting until a broker behind it takes a connection again: clients get connection refused."""
        entry = self._serving.get(listener)
        if entry is None or self._closing or listener in self._paused:
            return
        server, port, addresses = entry
        self._paused.add(listener)
        server.close()
        self._servers.remove(server)
        log.warning(
            "%s: no broker reachable (%s); not accepting on port %d until one is",
            listener,
            ", ".join(f"{host}:{p}" for host, p in addresses()),
            port,
        )
        self._spawn(f"{listener}-resume", lambda: self._resume_when_reachable(listener, port, addresses))

    async def _resume_when_reachable(self, listener: str, port: int, addresses: Addresses) -> None:
        wait = LISTENER_RETRY_MIN_SECONDS
        while True:
            await asyncio.sleep(wait)
            wait = min(wait * 2, LISTENER_RETRY_MAX_SECONDS)
            for host, broker_port in addresses():
                try:
                    transport, _ = await self.upstream.connect(host, broker_port, asyncio.Protocol)
                except (OSError, TimeoutError):
                    continue
                transport.close()
                sock = self._bind(listener, port)
                if sock is None:
                    break
                self._paused.discard(listener)
                await self._serve(sock, listener, addresses)
                log.info("%s: broker %s:%d reachable again; accepting on port %d", listener, host, broker_port, port)
                return

    def close(self) -> None:
        """Stops accepting on every listener (shutdown)."""
        self._closing = True
        for server in self._servers:
            server.close()

    async def wait_closed(self) -> None:
        for server in self._servers:
            await server.wait_closed()


class HandshakeFailureLog:
    """Failed TLS handshakes with clients: each counted by reason, logged at most once per
    TLS_FAILURE_LOG_SECONDS per reason with how many went unlogged (a scanner can fail thousands)."""

    def __init__(self, metrics: ProxyMetrics, clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics = metrics
        self.clock = clock
        self._logged: dict[str, tuple[float, int]] = {}  # reason -> (last logged, since)

    def failed(self, reason: str, peer: str) -> None:
        self.metrics.tls_handshake_failures_total.labels(reason).inc()
        now = self.clock()
        last, unlogged = self._logged.get(reason, (-TLS_FAILURE_LOG_SECONDS, 0))
        if now - last < TLS_FAILURE_LOG_SECONDS:
            self._logged[reason] = (last, unlogged + 1)
            return
        self._logged[reason] = (now, 0)
        log.warning(
            "TLS handshake with client %s failed: %s%s", peer, reason,
            f" ({unlogged} more since the last such message)" if unlogged else "",
        )  # fmt: skip
