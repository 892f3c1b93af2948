"""Graceful shutdown: no new connections, requests already forwarded are answered before the close,
within shutdown_timeout_seconds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from struct import pack, unpack_from

from quotagate.config import parse_config
from quotagate.proxy.server import Proxy
from tests.proxy_fixtures import free_port_block
from tests.unit.test_connection import BrokerDouble, assert_closed, heartbeat, read_response


class SlowBrokerDouble(BrokerDouble):
    """Answers each request `delay` seconds after reading it (in order)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                request = await reader.readexactly(size)
                correlation_id = unpack_from(">i", request, 4)[0]
                self.received.append(correlation_id)
                await asyncio.sleep(self.delay if correlation_id < 1000 else 0)  # the proxy's own: at once
                payload = pack(">i", correlation_id) + self.response_body
                writer.write(pack(">i", len(payload)) + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@contextlib.asynccontextmanager
async def slow_proxy(delay: float, timeout: float) -> AsyncIterator[tuple[Proxy, int]]:
    first = free_port_block(12)
    broker = SlowBrokerDouble(delay)
    await broker.start(first)
    config = parse_config(
        f'[proxy]\nbootstrap_servers = ["127.0.0.1:{first}"]\nport = {first + 1}\n'
        f"connect_timeout_seconds = 2\nmetadata_refresh_seconds = 3600\nshutdown_timeout_seconds = {timeout}\n"
    )
    proxy = Proxy(config)
    await proxy.start()
    try:
        yield proxy, first + 1
    finally:
        await proxy.stop()
        await broker.stop()


async def test_requests_in_flight_at_shutdown_are_answered_then_the_connection_closes() -> None:
    async with slow_proxy(delay=0.2, timeout=10) as (proxy, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(heartbeat(i) for i in range(5)))
        await asyncio.sleep(0.1)  # forwarded; the broker answers one every 0.2 s
        stopping = asyncio.get_running_loop().create_task(proxy.stop())
        await asyncio.sleep(0.05)
        try:
            await asyncio.open_connection("127.0.0.1", port)
            refused = False
        except OSError:
            refused = True
        assert refused, "no new connection is accepted once shutdown began"
        answers = [(await asyncio.wait_for(read_response(reader), 5))[0] for _ in range(5)]
        assert answers == list(range(5))
        await assert_closed(reader)
        await stopping


async def test_shutdown_closes_after_its_deadline_when_the_broker_does_not_answer() -> None:
    async with slow_proxy(delay=30, timeout=0.3) as (proxy, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(heartbeat(1))
        await asyncio.sleep(0.1)
        started = asyncio.get_running_loop().time()
        await proxy.stop()
        assert asyncio.get_running_loop().time() - started < 5, "bounded by shutdown_timeout_seconds"
        await assert_closed(reader)
