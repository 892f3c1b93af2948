"""One client connection and the broker connection it is paired with: the I/O around a `Session`.

The session (session.py) makes every decision: what to forward, what to answer, whom to charge,
when to mute. These two protocols only move bytes: client reads go to `Session.client_data`,
broker reads to `Session.broker_data`, and after each call what the session queued is written out
and the client's FlowControl (flow_control.py, the one owner of "is it read now") says whether to
read on: not while the session is muted (the shared delay queue wakes it when the mute is over) or
holds frames.

Back-pressure: when one side's write buffer fills, reading from the other side pauses (a reason of
that side's FlowControl), so a slow reader never makes the proxy buffer without bound. When either
side closes, the other is closed (after flushing what was already queued for it). Bad bytes from
either peer close this pair only: from the broker at once; from the client (the session's
`refusal`) once the answers to the requests before the offender are written, as the broker answers
them before it closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, cast

from quotagate import compiled
from quotagate.proxy.delay_queue import DelayQueue
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.session import PROTOCOL_ERROR, REFUSAL_ANSWERS_TIMEOUT_SECONDS, Session, SessionServices
from quotagate.proxy.upstream import Upstream
from quotagate.security.principal_mapping import NoMatchingRule
from quotagate.security.tls import TlsContexts, certificate_principal

_core = compiled.load("quotagate.proxy.connection_core")
ClientCore, UpstreamCore = _core.ClientCore, _core.UpstreamCore
FlowControl = compiled.load("quotagate.proxy.flow_control").FlowControl

log = logging.getLogger("quotagate.proxy")

WRITE_BUFFER_HIGH = 1024 * 1024
WRITE_BUFFER_LOW = 256 * 1024


class ConnectionContext(Protocol):
    """What a connection pair uses of the proxy that accepted it, and nothing more (`Proxy` is one;
    a test hands a small double)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...  # its clock, and timers (refusal, held reads)

    @property
    def metrics(self) -> ProxyMetrics: ...  # protocol errors, upstream connect failures, pairing failures

    @property
    def delay_queue(self) -> DelayQueue: ...  # mutes

    @property
    def tls(self) -> TlsContexts: ...  # the principal mapper for client certificates

    @property
    def upstream(self) -> Upstream: ...  # how a broker is connected to (TLS, timeout, socket options)

    def session_services(self) -> SessionServices: ...

    def connection_opened(self, client: ClientConnection) -> bool:
        """Applies the connection limits to a client just accepted; False if it was closed for them."""

    def connection_closed(self, client: ClientConnection) -> None: ...

    def upstream_unreachable(self, listener: str) -> None:
        """No broker behind `listener` took a connection: it stops accepting until one does."""

    def open_broker_listeners(self, node_ids: Iterable[int]) -> None:
        """Binds a listener for each broker not served yet; the sockets listen when it returns."""


class ClientGlue:
    """A client connection's Python side (`ClientConnection` puts it over ClientCore): reads requests
    into the session, writes its answers, mutes. `data_received` and `flush`, run per read, are
    ClientCore's (connection_core.py, compiled when it can be); it calls `_close_when_answered`,
    `_mute` and `_open_brokers_seen` here for the rare cases. Whether the client is read is its
    session's FlowControl's (`flow`), which every session this connection makes shares.
    `session_class` and `upstream_class` are the classes of the same build (tests/support/builds.py
    makes the interpreted pair)."""

    session_class: type[Session]
    upstream_class: type[UpstreamConnection]

    def __init__(self, proxy: ConnectionContext, listener: str, upstreams: Sequence[tuple[str, int]]) -> None:
        self.proxy = proxy
        self.listener = listener
        self.upstreams = upstreams
        self.session = self.session_class(proxy.session_services())
        self.session.answer_ready = self._local_answer_ready
        self.flow = self.session.flow
        self.clock = proxy.loop.time
        self.transport: asyncio.Transport | None = None
        self.upstream: UpstreamConnection | None = None
        self.peer = "?"
        self.closed = False
        # The session refused the client: closing once what went before is answered, or at this timer.
        self.refusal_timer: asyncio.TimerHandle | None = None
        self.last_activity = self.clock()  # last byte either way (connections_max_idle_ms)

    # asyncio callbacks -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport = transport
        transport.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.flow.attach(transport)
        self.flow.pause("upstream-connecting")
        if not self.proxy.connection_opened(self):  # False: closed by a connection limit
            return
        try:  # with TLS, the handshake is over: a verified client certificate names the user
            principal = certificate_principal(transport.get_extra_info("ssl_object"), self.proxy.tls.mapper)
        except NoMatchingRule as exc:
            log.warning(
                "%s: closing client %s: its certificate maps to no principal: %s", self.listener, self.peer, exc
            )
            transport.abort()
            return
        if principal is not None:
            self.session = self.session_class(self.proxy.session_services(), principal, self.flow)
            self.session.answer_ready = self._local_answer_ready
        connecting = asyncio.get_running_loop().create_task(self._connect_upstream())
        connecting.add_done_callback(self._connect_upstream_done)

    def pause_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.flow.pause("client-backpressure")

    def resume_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.flow.resume("client-backpressure")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.flow.closed = True
        self.session.close()
        if self.refusal_timer is not None:
            self.refusal_timer.cancel()
        self.proxy.connection_closed(self)
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    # the session's output (ClientCore.flush writes it and calls these for the rare cases) --------
    def _close_when_answered(self) -> None:
        """The session refused the client (its FlowControl reads nothing more): the pair closes once
        the answers to the requests before the offender are written (the broker answers them before it closes), or
        after REFUSAL_ANSWERS_TIMEOUT_SECONDS without them."""
        session = self.session
        if self.refusal_timer is None:
            metrics = self.proxy.metrics
            if session.refusal_reason == PROTOCOL_ERROR:
                metrics.protocol_errors_total.labels("client").inc()
            log.warning("%s: closing client %s: %s", self.listener, self.peer, session.refusal)
            self.refusal_timer = self.proxy.loop.call_later(REFUSAL_ANSWERS_TIMEOUT_SECONDS, self._abort_pair)
        if not session.awaiting_answers:
            self.close()
            if self.upstream is not None and self.upstream.transport is not None:
                self.upstream.transport.close()

    def _mute(self) -> None:
        self.proxy.delay_queue.wake(self.flow, self.unmute)

    def _open_brokers_seen(self) -> None:
        seen = self.session.brokers_seen
        self.proxy.open_broker_listeners(seen)  # bound now: flush writes the response naming them next
        seen.clear()

    def _abort_pair(self) -> None:
        if not self.closed:
            self._abort()

    @property
    def muted(self) -> bool:
        return self.flow.muted(self.clock())

    def unmute(self) -> None:
        """Called by the delay queue when the throttle time is over."""
        if self.closed or self.transport is None:
            return
        self._resume(self.session.unmute)

    def _local_answer_ready(self) -> None:
        """An answer the proxy was making (an alter being persisted) is ready: written in its turn."""
        if self.closed or self.transport is None:
            return
        self._resume(self.session.local_answered)

    def _broker_connected(self) -> None:
        self._resume(self.session.broker_connected)

    def _resume(self, release: Callable[[float], None]) -> None:
        """Lets the session forward what it held; `flush` then reads on unless something still holds."""
        now = self.clock()
        release(now)
        self.flush(now)

    # pairing -----------------------------------------------------------------------------------
    async def _connect_upstream(self) -> None:
        for host, port in self.upstreams:
            if self.closed:
                return
            try:
                _, upstream = await self.proxy.upstream.connect(host, port, lambda: self.upstream_class(self))
            except (OSError, TimeoutError) as exc:
                self.proxy.metrics.upstream_connect_failures_total.inc()
                log.debug("%s: cannot connect to broker %s:%s: %s", self.listener, host, port, exc or "timeout")
                continue
            if self.closed:
                upstream.transport.close()
                return
            self.upstream = upstream
            self.flow.resume("upstream-connecting")
            self._broker_connected()
            return
        log.debug("%s: no broker reachable for client %s; closing it", self.listener, self.peer)
        self.proxy.upstream_unreachable(self.listener)  # logs once, stops accepting until one is
        self.close()

    def _connect_upstream_done(self, task: asyncio.Task[None]) -> None:
        """A defect while pairing closes this client (it would otherwise wait forever), logged and counted."""
        if task.cancelled() or task.exception() is None:
            return
        self.proxy.metrics.background_task_failures_total.labels("connect-upstream").inc()
        log.error("%s: closing client %s: pairing it with a broker failed", self.listener, self.peer,
                  exc_info=task.exception())  # fmt: skip
        self._abort()

    def hold_reading(self, seconds: float) -> None:
        """Reads nothing from this client for `seconds` (max_connection_creation_rate).

        Pausing the transport is not enough: uvloop starts reading an accepted connection after
        `connection_made` returns, whatever it asked for (0.23), so a pause made there is lost.
        `HeldReads` takes the protocol's place meanwhile: a read that arrives is kept, not
        handled, and pauses the transport for real; the client gets it when the wait is over."""
        assert self.transport is not None
        held = HeldReads(self)
        self.transport.set_protocol(held)
        self.flow.pause("connection-rate")
        self.proxy.loop.call_later(seconds, self._end_hold, held)

    def _end_hold(self, held: HeldReads) -> None:
        if self.closed or self.transport is None:
            return
        self.transport.set_protocol(self)
        if held.data:
            self.data_received(bytes(held.data))
        self.flow.resume("connection-rate")

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def protocol_error(self, side: str, exc: Exception) -> None:
        """Bad bytes from one peer close this pair only; every other connection goes on."""
        if self.session.brokers_seen:  # a response rewritten before the bad bytes named them: kept open
            self._open_brokers_seen()
        self.proxy.metrics.protocol_errors_total.labels(side).inc()
        log.warning("%s: closing client %s: bad bytes from the %s: %s", self.listener, self.peer, side, exc)
        self._abort()

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.abort()


class HeldReads(asyncio.Protocol):
    """A client connection's protocol while its reads are held (`ClientConnection.hold_reading`):
    keeps what arrives (one read at most: it pauses the transport) and passes the rest on."""

    def __init__(self, client: ClientConnection) -> None:
        self.client = client
        self.data = bytearray()

    def data_received(self, data: bytes) -> None:
        self.data += data
        assert self.client.transport is not None
        self.client.transport.pause_reading()

    def pause_writing(self) -> None:
        self.client.pause_writing()

    def resume_writing(self) -> None:
        self.client.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.connection_lost(exc)


class UpstreamGlue:
    """The broker side of a pair: responses go into the client's session, its answers out
    (`data_received` is UpstreamCore's, `UpstreamConnection` puts this over it)."""

    def __init__(self, client: ClientConnection) -> None:
        self.client = client
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set in connection_made
        self.flow = FlowControl()  # back-pressure from the client side is its only reason

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport = transport
        transport.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        self.flow.attach(transport)

    def pause_writing(self) -> None:
        self.client.flow.pause("upstream-backpressure")

    def resume_writing(self) -> None:
        self.client.flow.resume("upstream-backpressure")

    def connection_lost(self, exc: Exception | None) -> None:
        # A broken upstream gives the client a closed connection (after what was queued), never a hang.
        self.client.close()


class UpstreamConnection(UpstreamGlue, UpstreamCore, asyncio.Protocol):
    """The broker side of a pair, over the loaded build's UpstreamCore."""


class ClientConnection(ClientGlue, ClientCore, asyncio.Protocol):
    """The client side of a pair, over the loaded build's ClientCore and Session."""

    session_class = Session
    upstream_class = UpstreamConnection
