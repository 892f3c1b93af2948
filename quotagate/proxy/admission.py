"""Which accepted client connections are served, as the broker's acceptor and selector decide it
(proxy/connection_limits.py holds the decisions): the ip entity's connection_creation_rate quota
(KIP-612, closed after its throttle), max_connections_per_ip (closed at once), the creation rate
(held, read once it allows) and connections_max_idle_ms (closed). It keeps the admitted clients.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from quotagate.proxy.connection_limits import REFUSED, ConnectionLimits, LimitSettings
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.quotas import QuotaEngine

if TYPE_CHECKING:
    from quotagate.proxy.connection import ClientConnection

log = logging.getLogger("quotagate.proxy")

# Idle connections are looked for every quarter of connections_max_idle_ms, at most this far apart.
IDLE_CHECK_MAX_SECONDS = 5.0


class Admission:
    def __init__(
        self, settings: LimitSettings, engine: QuotaEngine, metrics: ProxyMetrics, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.engine = engine  # the ip quotas
        self.metrics = metrics
        self.loop = loop
        self.limits = ConnectionLimits(settings, loop.time())
        self.clients: set[ClientConnection] = set()  # admitted, not closed yet
        self._addresses: dict[ClientConnection, str] = {}  # admitted clients -> their address

    def opened(self, client: ClientConnection) -> bool:
        """Applies the connection limits to a client just accepted; False if it was closed for them."""
        self.metrics.connections_total.labels(client.listener).inc()
        assert client.transport is not None
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
        self._addresses[client] = address
        self.clients.add(client)
        self.metrics.connections.labels(client.listener).inc()
        if wait > 0:  # over max_connection_creation_rate: accepted, read once the rate allows
            self.metrics.connections_delayed_total.inc()
            client.hold_reading(wait)
        return True

    def closed(self, client: ClientConnection) -> None:
        address = self._addresses.pop(client, None)
        if address is None:
            return  # refused at accept: never counted
        self.limits.release(address)
        self.clients.discard(client)
        self.metrics.connections.labels(client.listener).dec()

    def close_idle(self, now: float) -> int:
        """Closes client connections over which no byte moved for connections_max_idle_ms (a muted
        client is waiting on the proxy, not idle); returns how many."""
        idle = [c for c in self.clients if not c.muted and self.limits.is_idle(c.last_activity, now)]
        for client in idle:
            log.debug("%s: closing %s: idle for connections_max_idle_ms", client.listener, client.peer)
            client.close()
        self.metrics.connections_idle_closed_total.inc(len(idle))
        return len(idle)

    async def close_idle_periodically(self) -> None:
        period = min(self.limits.settings.max_idle_seconds / 4, IDLE_CHECK_MAX_SECONDS)
        while True:
            await asyncio.sleep(period)
            self.close_idle(self.loop.time())
