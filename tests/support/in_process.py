"""A client connection and its upstream pair, wired to fake transports: the proxy's connection layer
(the glue and its session) driven in-process, without sockets or an event loop turning (the
hot-path bench)."""

from __future__ import annotations

from collections.abc import Iterable

from quotagate.proxy.connection import ClientConnection, ConnectionContext, UpstreamConnection


class Clock:
    """What a glue or endpoint double's `loop` is read for: its clock, set by the test."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


class FakeTransport:
    """What the connection layer uses of a transport; written bytes are kept unless told not to."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self.data = bytearray()
        self.written = 0
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += len(data)
        if self.keep:
            self.data += data

    def writelines(self, lines: Iterable[bytes | memoryview]) -> None:
        for line in lines:
            self.write(line)  # type: ignore[arg-type]

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    abort = close

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass


def connected_pair(
    proxy: ConnectionContext, keep: bool = True, client_class: type[ClientConnection] = ClientConnection
) -> tuple[ClientConnection, UpstreamConnection, FakeTransport, FakeTransport]:
    """A client connection already paired with its upstream, as after `_connect_upstream`.
    `proxy`: a Proxy, or a small double of what the glue uses of it; `client_class`: a build's
    (tests/support/builds.py), its upstream class with it."""
    client = client_class(proxy, "bootstrap", [])
    client_transport, upstream_transport = FakeTransport(keep), FakeTransport(keep)
    client.transport = client_transport  # type: ignore[assignment]
    client.flow.attach(client_transport)
    upstream = client.upstream_class(client)
    upstream.connection_made(upstream_transport)  # type: ignore[arg-type]
    client.upstream = upstream
    client._broker_connected()
    return client, upstream, client_transport, upstream_transport
