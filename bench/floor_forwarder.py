#!/usr/bin/env python3
"""The least a Python proxy on uvloop can do per read: forward it. No framing, no Kafka, no quotas.

bench/ab.py runs it beside haproxy and quotagate to show the floor of the stack quotagate is built
on: its CPU per request against haproxy's is what an asyncio `Protocol` pair costs before any Kafka
logic, so quotagate's CPU above it is the session's. Only for the bench's loopback broker: one
upstream, flow control by pausing the other side's reads, a close on either side closes both.

    python bench/floor_forwarder.py LISTEN_PORT UPSTREAM_PORT
"""

from __future__ import annotations

import asyncio
import sys

import uvloop

HOST = "127.0.0.1"


class Upstream(asyncio.Protocol):
    def __init__(self, client: Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)  # type: ignore[union-attr]

    def pause_writing(self) -> None:
        self.client.transport.pause_reading()  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        self.client.transport.resume_reading()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.transport.close()  # type: ignore[union-attr]


class Client(asyncio.Protocol):
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.transport: asyncio.Transport | None = None
        self.upstream: Upstream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.pause_reading()  # until the upstream is connected
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, self.upstream = await loop.create_connection(lambda: Upstream(self), HOST, self.upstream_port)
        except OSError:
            self.transport.close()  # type: ignore[union-attr]
            return
        self.transport.resume_reading()  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        self.upstream.transport.write(data)  # type: ignore[union-attr]

    def pause_writing(self) -> None:
        self.upstream.transport.pause_reading()  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        self.upstream.transport.resume_reading()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


async def serve(listen_port: int, upstream_port: int) -> None:
    server = await asyncio.get_running_loop().create_server(lambda: Client(upstream_port), HOST, listen_port)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), int(sys.argv[2])))
