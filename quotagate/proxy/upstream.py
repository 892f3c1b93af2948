"""The one way the proxy reaches a broker.

Every connection the proxy opens to a broker goes through `Upstream.connect`: a client session's
pair, the discovery Metadata request, the readiness probe's ApiVersions, a listener's check that a
broker takes connections again. So each gets the same settings: TLS by [upstream.tls] (its CAs,
the proxy's client certificate, the host name check, the broker's host as SNI), the connect timeout
(TLS handshake included) and the socket options Kafka's own clients set. A path that connected on
its own drifted: the readiness probe spoke plaintext to brokers that discovery reached over TLS, and
/readyz said "not ready" for good behind an SSL listener.

`ask` is the proxy's own one-request exchange (discovery, the probe): connect, write one request,
read the one response frame, close. It never holds more than MAX_ANSWER_BYTES of an answer.

Nothing else in the proxy opens a connection to a broker; nothing here decides what to ask.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import TypeVar

from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError

P = TypeVar("P", bound=asyncio.BaseProtocol)

# Set on every broker connection, as Kafka's clients set them (Selector.configureSocketChannel):
# no Nagle delay for small requests, and keepalive so that a peer gone without a FIN is noticed.
SOCKET_OPTIONS = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1), (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
# The largest answer `ask` reads: the Metadata of every topic of a 200 000-partition cluster is ~12 MB.
MAX_ANSWER_BYTES = 100 * 1024 * 1024


class Unanswered(Exception):
    """The broker took the connection and closed it before a whole answer (a SASL listener closes a
    request sent before authentication so). Not an OSError: the connection itself worked."""


class Upstream:
    """Connections to brokers with one set of settings. `tls` is [upstream.tls]'s context (None:
    plaintext); TlsContexts reloads certificates into that same object, so it is kept, not copied."""

    def __init__(self, tls: ssl.SSLContext | None, connect_timeout: float) -> None:
        self.tls = tls
        self.connect_timeout = connect_timeout

    async def connect(self, host: str, port: int, protocol: Callable[[], P]) -> tuple[asyncio.Transport, P]:
        """A connection to the broker (handshaken, with TLS) and the protocol `protocol` made for it,
        as the loop's create_connection returns them. Raises OSError (ssl.SSLError included), or
        TimeoutError after connect_timeout."""
        loop = asyncio.get_running_loop()
        transport, connected = await asyncio.wait_for(
            loop.create_connection(
                protocol, host, port, ssl=self.tls, server_hostname=host if self.tls is not None else None
            ),
            self.connect_timeout,
        )
        sock = transport.get_extra_info("socket")
        if sock is not None:
            for level, option, value in SOCKET_OPTIONS:
                sock.setsockopt(level, option, value)
        return transport, connected  # type: ignore[return-value]  # uvloop's transports do not subclass it

    async def ask(self, host: str, port: int, request: bytes, timeout: float) -> bytes:
        """The broker's response frame (size prefix included) to one framed request, all within
        `timeout` (the connect within connect_timeout too). Raises OSError, TimeoutError, FrameError
        (an answer larger than MAX_ANSWER_BYTES) or Unanswered."""
        async with asyncio.timeout(timeout):
            _, exchange = await self.connect(host, port, lambda: _OneAnswer(request, MAX_ANSWER_BYTES))
            try:
                return await exchange.answer
            finally:
                exchange.close()


class _OneAnswer(asyncio.Protocol):
    """Writes one request when connected and completes `answer` with the first whole frame read."""

    def __init__(self, request: bytes, max_bytes: int) -> None:
        self.request = request
        self.max_bytes = max_bytes
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.received = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self.request)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        if self.answer.done():
            return
        self.received += data
        if len(self.received) < FRAME_SIZE_BYTES:
            return
        size = int.from_bytes(self.received[:FRAME_SIZE_BYTES], "big", signed=True)
        if not 0 <= size <= self.max_bytes:
            self.answer.set_exception(FrameError(f"answer of {size} bytes (at most {self.max_bytes} are read)"))
        elif len(self.received) >= FRAME_SIZE_BYTES + size:
            self.answer.set_result(bytes(self.received[: FRAME_SIZE_BYTES + size]))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.answer.done():
            return
        if isinstance(exc, OSError):  # reset, or a TLS alert (TLS 1.3 refuses a client certificate here)
            self.answer.set_exception(exc)
        else:
            got = f"{len(self.received)} bytes" if self.received else "nothing"
            self.answer.set_exception(Unanswered(f"closed after {got}, before a whole answer"))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if not self.answer.done():
            self.answer.cancel()
