"""The connection layer against a minimal broker double: order, isolation, closes, backpressure.

The double answers every request in order with its correlation id and a body it is told to send. It
stands in for the broker only to test this one layer; the integration tests use a real Kafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from struct import pack, unpack_from

import pytest

from quotagate.config import parse_config
from quotagate.protocol.framing import FrameSplitter
from quotagate.proxy.server import Proxy
from tests.proxy_fixtures import free_port_block

HEARTBEAT = 12


class BrokerDouble:
    def __init__(self, response_body: bytes = b"\x00\x00") -> None:
        self.response_body = response_body
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.received: list[int] = []

    async def start(self, port: int) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                request = await reader.readexactly(size)
                correlation_id = unpack_from(">i", request, 4)[0]
                self.received.append(correlation_id)
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


@pytest.fixture
async def rig() -> AsyncIterator[tuple[Proxy, BrokerDouble, int]]:
    first = free_port_block(12)  # broker double, bootstrap, broker listeners
    broker = BrokerDouble()
    await broker.start(first)
    config = parse_config(
        f'[proxy]\nbootstrap_servers = ["127.0.0.1:{first}"]\nport = {first + 1}\n'
        f"connect_timeout_seconds = 2\nmetadata_refresh_seconds = 3600\n"
    )
    proxy = Proxy(config)
    await proxy.start()
    yield proxy, broker, first + 1
    await proxy.stop()
    await broker.stop()


async def test_pipelined_requests_get_their_responses_in_order(rig) -> None:
    _, broker, port = rig
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(heartbeat(i) for i in range(500)))
    responses = [(await read_response(reader))[0] for _ in range(500)]
    assert responses == list(range(500))
    assert broker.received[-500:] == list(range(500))  # before them: the proxy's own discovery request
    writer.close()


async def test_bad_bytes_close_only_that_client(rig) -> None:
    _, _, port = rig
    good_reader, good_writer = await asyncio.open_connection("127.0.0.1", port)
    bad_reader, bad_writer = await asyncio.open_connection("127.0.0.1", port)
    good_writer.write(heartbeat(1))
    assert (await read_response(good_reader))[0] == 1
    bad_writer.write(pack(">i", -7) + b"garbage")
    await assert_closed(bad_reader)
    good_writer.write(heartbeat(2))
    assert (await read_response(good_reader))[0] == 2
    good_writer.close()


async def test_a_frame_larger_than_max_frame_size_closes_the_client(rig) -> None:
    proxy, _, port = rig
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(pack(">i", proxy.config.proxy.max_frame_size + 1))
    await assert_closed(reader)


async def test_broker_closing_closes_the_client_instead_of_hanging(rig) -> None:
    _, broker, port = rig
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(heartbeat(1))
    assert (await read_response(reader))[0] == 1
    await broker.stop()
    await assert_closed(reader)


async def test_unreachable_broker_closes_the_client() -> None:
    first = free_port_block(2)  # nothing listens on `first`
    config = parse_config(f'[proxy]\nbootstrap_servers = ["127.0.0.1:{first}"]\nport = {first + 1}\n')
    proxy = Proxy(config)
    await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", first + 1)
        writer.write(heartbeat(1))
        await assert_closed(reader)
    finally:
        await proxy.stop()


async def test_a_client_that_does_not_read_pauses_the_broker_side(rig) -> None:
    proxy, broker, port = rig
    broker.response_body = b"r" * 64 * 1024  # 64 KiB per response
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=64 * 1024)
    for i in range(400):  # 25 MiB of responses that the client never reads
        writer.write(heartbeat(i))
    await writer.drain()
    await asyncio.sleep(1.0)
    (client,) = proxy.clients
    assert client.upstream is not None and client.upstream.reading.paused
    # What the proxy holds for this client stays near its write-buffer limit, not 25 MiB.
    held = client.transport.get_write_buffer_size() + client.upstream.splitter.buffered
    assert held < 4 * 1024 * 1024, held
    # Once the client reads again, everything arrives, in order.
    got = [(await read_response(reader))[0] for _ in range(400)]
    assert got == list(range(400))
    writer.close()


def test_splitter_is_what_the_connection_uses() -> None:
    # Guard against a second framing implementation creeping into the proxy layer.
    import quotagate.proxy.connection as connection

    assert connection.FrameSplitter is FrameSplitter


async def test_a_broker_named_later_gets_a_listener_bound_before_the_answer_leaves(rig) -> None:
    proxy, _, _ = rig
    late_node = 5
    real_port = free_port_block(1)
    broker = BrokerDouble()
    await broker.start(real_port)
    try:
        host, port = proxy.advertise(late_node, "127.0.0.1", real_port)
        assert (host, port) == ("127.0.0.1", proxy.config.proxy.broker_port(late_node))
        # No await between advertise and connect: the socket must already be listening.
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(heartbeat(77))
        assert (await read_response(reader))[0] == 77
        assert broker.received == [77]
        writer.close()
    finally:
        await broker.stop()
