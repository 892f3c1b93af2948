"""A client connection and its upstream pair, wired to fake transports: the proxy's connection layer
(the glue and its session) driven in-process, without sockets or an event loop turning (the
hot-path bench)."""

from __future__ import annotations

from collections.abc import Iterable

from quotagate.proxy.connection import ClientConnection, UpstreamConnection
from quotagate.proxy.flow_control import ReadGate
from quotagate.proxy.server import Proxy


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
    proxy: Proxy, keep: bool = True
) -> tuple[ClientConnection, UpstreamConnection, FakeTransport, FakeTransport]:
    """A client connection already paired with its upstream, as after `_connect_upstream`."""
    client = ClientConnection(proxy, "bootstrap", [])
    client_transport, upstream_transport = FakeTransport(keep), FakeTransport(keep)
    client.transport = client_transport  # type: ignore[assignment]
    client.reading = ReadGate(client_transport)  # type: ignore[arg-type]
    upstream = UpstreamConnection(client)
    upstream.connection_made(upstream_transport)  # type: ignore[arg-type]
    client.upstream = upstream
    client._broker_connected()
    return client, upstream, client_transport, upstream_transport
