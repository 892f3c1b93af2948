"""A minimal broker double and a proxy started in front of it, in this process on 127.0.0.1 (the loopback tests),
and the request bytes those tests send. Also a pytest plugin: the `rig` fixture (listed in tests/conftest.py).

The double answers every request in order with its correlation id and a body it is told to send. It
stands in for the broker only to test the connection layer; the integration tests use a real Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from struct import pack, unpack_from

import pytest

from quotagate.config import parse_config
from quotagate.proxy.server import Proxy
from tests.support.proxy_fixtures import free_port_block

HEARTBEAT = 12


class BrokerDouble:
    def __init__(self, response_body: bytes = b"\x00\x00") -> None:
        self.response_body = response_body
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.received: list[int] = []

    async def start(self, port: int) -> None:
        # A backlog for a thousand connections at once (asyncio's default is 100): past it, a SYN is
        # dropped and retried 1 s then 3 s later, beyond the rig's 2-s connect timeout, and the proxy
        # takes the double for unreachable and stops accepting.
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port, backlog=1024)

    async def before_read(self) -> None:
        """Subclasses may wait here (a frozen broker reads nothing)."""

    async def before_answer(self, correlation_id: int) -> None:
        """Subclasses may wait here (a slow or frozen broker)."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                await self.before_read()
                size = int.from_bytes(await reader.readexactly(4), "big")
                request = await reader.readexactly(size)
                correlation_id = unpack_from(">i", request, 4)[0]
                self.received.append(correlation_id)
                await self.before_answer(correlation_id)
                payload = pack(">i", correlation_id) + self.response_body
                writer.write(pack(">i", len(payload)) + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def stop(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def heartbeat(correlation_id: int) -> bytes:
    payload = pack(">hhih", HEARTBEAT, 0, correlation_id, 3) + b"app" + b"body"
    return pack(">i", len(payload)) + payload


async def assert_closed(reader: asyncio.StreamReader) -> None:
    """The proxy closed the connection (EOF or reset), within 5 s: never a hang."""
    try:
        assert await asyncio.wait_for(reader.read(), 5) == b""
    except ConnectionResetError:
        pass


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    size = int.from_bytes(await reader.readexactly(4), "big")
    payload = await reader.readexactly(size)
    return unpack_from(">i", payload)[0], payload[4:]


@contextlib.asynccontextmanager
async def proxy_in_front_of(
    broker: BrokerDouble, proxy_toml: str = "", top_toml: str = "", connect_timeout: float = 2.0
) -> AsyncIterator[tuple[Proxy, BrokerDouble, int]]:
    """A started proxy in front of `broker` (started here too): (proxy, broker, bootstrap port).
    `proxy_toml` adds [proxy] keys, `top_toml` top-level ones; `connect_timeout` is the proxy's
    connect_timeout_seconds, short so that tests of an unreachable broker finish quickly."""
    first = free_port_block(12)  # broker double, bootstrap, broker listeners
    await broker.start(first)
    config = parse_config(
        f'{top_toml}\n[proxy]\nbootstrap_servers = ["127.0.0.1:{first}"]\nport = {first + 1}\n'
        f"connect_timeout_seconds = {connect_timeout}\nmetadata_refresh_seconds = 3600\n{proxy_toml}\n"
    )
    proxy = Proxy(config)
    await proxy.start()
    try:
        yield proxy, broker, first + 1
    finally:
        await proxy.stop()
        await broker.stop()


@pytest.fixture
async def rig() -> AsyncIterator[tuple[Proxy, BrokerDouble, int]]:
    async with proxy_in_front_of(BrokerDouble()) as started:
        yield started


def fetch_v4(correlation_id: int, client_id: bytes = b"app") -> bytes:
    """The head of a Fetch v4 request: what the proxy peeks at (replica id, max wait); the double
    answers without reading the rest."""
    payload = pack(">hhih", FETCH, 4, correlation_id, len(client_id)) + client_id + pack(">iii", -1, 0, 1)
    return pack(">i", len(payload)) + payload


FETCH = 1


def header_only_request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    payload = pack(">hhih", api_key, version, correlation_id, 3) + b"app" + body
    return pack(">i", len(payload)) + payload
