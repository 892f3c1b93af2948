"""One client connection and the upstream broker connection it is paired with.

Data path: client bytes -> frames -> header peek -> (remember what response to expect) -> upstream;
upstream bytes -> frames -> match the oldest request -> rewrite if the API names brokers -> client.
Kafka answers the requests of one connection in order, so a FIFO of in-flight requests is enough
to know which API each response belongs to, and pipelined requests keep their order.

Flow control: when one side's write buffer fills, reading from the other side pauses, so a slow
reader never makes the proxy buffer without bound. When either side closes, the other is closed
(after flushing what was already queued for it).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, cast

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.framing import FrameError, FrameSplitter
from quotagate.protocol.headers import peek_correlation_id, peek_request_header
from quotagate.protocol.produce import produce_request_acks
from quotagate.protocol.rewrite import RESPONSE_REWRITERS
from quotagate.proxy.flow_control import ReadGate

if TYPE_CHECKING:
    from quotagate.proxy.server import Proxy

log = logging.getLogger("quotagate.proxy")

WRITE_BUFFER_HIGH = 1024 * 1024
WRITE_BUFFER_LOW = 256 * 1024
# Responses are not bounded by the client's max frame size; the broker's fetch.max.bytes is.
MAX_RESPONSE_FRAME = 2**31 - 1


class InFlight(NamedTuple):
    correlation_id: int
    api_key: int
    api_version: int


class ClientConnection(asyncio.Protocol):
    """The client side of a pair; owns the pairing and the in-flight FIFO."""

    def __init__(self, proxy: Proxy, listener: str, upstreams: Sequence[tuple[str, int]]) -> None:
        self.proxy = proxy
        self.listener = listener
        self.upstreams = upstreams
        self.transport: asyncio.Transport | None = None
        self.reading: ReadGate | None = None
        self.upstream: UpstreamConnection | None = None
        self.splitter = FrameSplitter(proxy.config.proxy.max_frame_size)
        self.in_flight: deque[InFlight] = deque()
        self.early_frames: list[memoryview] = []
        self.peer = "?"
        self.closed = False

    # asyncio callbacks -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport = transport
        transport.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.reading = ReadGate(transport)
        self.reading.pause("upstream-connecting")
        self.proxy.connection_opened(self)
        asyncio.get_running_loop().create_task(self._connect_upstream())

    def data_received(self, data: bytes) -> None:
        metrics = self.proxy.metrics
        metrics.bytes_in.inc(len(data))
        try:
            frames = self.splitter.feed(data)
            for frame in frames:
                header = peek_request_header(frame)
                metrics.count_request(header.api_key)
                if header.api_key == ApiKey.PRODUCE and (
                    produce_request_acks(frame, header.body_offset, header.api_version) == 0
                ):
                    continue  # acks=0: the broker sends no response
                self.in_flight.append(InFlight(header.correlation_id, header.api_key, header.api_version))
        except FrameError as exc:
            self.protocol_error("client", exc)
            return
        if not frames:
            return
        if self.upstream is None:
            # uvloop starts reading after connection_made, ignoring a pause made there: hold what
            # arrived early (one read at most) and pause again until the broker connection is up.
            self.early_frames.extend(frames)
            if self.transport is not None:
                self.transport.pause_reading()
            return
        self.upstream.transport.writelines(frames)

    def pause_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.reading.pause("client-backpressure")

    def resume_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.reading.resume("client-backpressure")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.proxy.connection_closed(self)
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    # pairing -----------------------------------------------------------------------------------
    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        timeout = self.proxy.config.proxy.connect_timeout_seconds
        for host, port in self.upstreams:
            if self.closed:
                return
            try:
                _, upstream = await asyncio.wait_for(
                    loop.create_connection(lambda: UpstreamConnection(self), host, port), timeout
                )
            except (OSError, TimeoutError) as exc:
                self.proxy.metrics.upstream_connect_failures_total.inc()
                log.warning("%s: cannot connect to broker %s:%s: %s", self.listener, host, port, exc or "timeout")
                continue
            if self.closed:
                upstream.transport.close()
                return
            self.upstream = upstream
            if self.early_frames:
                upstream.transport.writelines(self.early_frames)
                self.early_frames = []
            assert self.reading is not None and self.transport is not None
            self.reading.resume("upstream-connecting")
            self.transport.resume_reading()  # the early-data pause above bypasses the gate
            return
        log.warning("%s: no broker reachable for client %s; closing it", self.listener, self.peer)
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def protocol_error(self, side: str, exc: Exception) -> None:
        """Bad bytes from one peer close this pair only; every other connection goes on."""
        self.proxy.metrics.protocol_errors_total.labels(side).inc()
        log.warning("%s: closing client %s: bad bytes from the %s: %s", self.listener, self.peer, side, exc)
        if self.transport is not None:
            self.transport.abort()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.abort()


class UpstreamConnection(asyncio.Protocol):
    """The broker side of a pair: responses come back here and go out to the client."""

    def __init__(self, client: ClientConnection) -> None:
        self.client = client
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set in connection_made
        self.reading: ReadGate = None  # type: ignore[assignment]  # set in connection_made
        self.splitter = FrameSplitter(MAX_RESPONSE_FRAME)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport = transport
        transport.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        self.reading = ReadGate(transport)

    def data_received(self, data: bytes) -> None:
        client = self.client
        try:
            frames = self.splitter.feed(data)
            out: list[bytes | memoryview] = []
            for frame in frames:
                correlation_id = peek_correlation_id(frame)
                if not client.in_flight:
                    raise FrameError(f"response {correlation_id} to no request")
                expected = client.in_flight.popleft()
                if correlation_id != expected.correlation_id:
                    raise FrameError(f"response {correlation_id} arrived where {expected.correlation_id} was due")
                rewrite = RESPONSE_REWRITERS.get(expected.api_key)
                if rewrite is not None:
                    rewritten = rewrite(frame, expected.api_version, client.proxy.advertise)
                    if rewritten is not None:
                        out.append(rewritten)
                        continue
                out.append(frame)
        except FrameError as exc:
            client.protocol_error("broker", exc)
            return
        if out and client.transport is not None:
            client.proxy.metrics.bytes_out.inc(sum(len(f) for f in out))
            client.transport.writelines(out)

    def pause_writing(self) -> None:
        if self.client.reading is not None:
            self.client.reading.pause("upstream-backpressure")

    def resume_writing(self) -> None:
        if self.client.reading is not None:
            self.client.reading.resume("upstream-backpressure")

    def connection_lost(self, exc: Exception | None) -> None:
        # A broken upstream gives the client a closed connection (after what was queued), never a hang.
        self.client.close()
