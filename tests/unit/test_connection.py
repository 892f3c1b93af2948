"""The connection layer against a minimal broker double: order, isolation, closes, backpressure.

The double answers every request in order with its correlation id and a body it is told to send. It
stands in for the broker only to test this one layer; the integration tests use a real Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Iterator
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
    broker: BrokerDouble, proxy_toml: str = "", top_toml: str = ""
) -> AsyncIterator[tuple[Proxy, BrokerDouble, int]]:
    """A started proxy in front of `broker` (started here too): (proxy, broker, bootstrap port).
    `proxy_toml` adds [proxy] keys, `top_toml` top-level ones."""
    first = free_port_block(12)  # broker double, bootstrap, broker listeners
    await broker.start(first)
    config = parse_config(
        f'{top_toml}\n[proxy]\nbootstrap_servers = ["127.0.0.1:{first}"]\nport = {first + 1}\n'
        f"connect_timeout_seconds = 2\nmetadata_refresh_seconds = 3600\n{proxy_toml}\n"
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
    held = client.transport.get_write_buffer_size() + client.session.broker_frames.buffered
    assert held < 4 * 1024 * 1024, held
    # Once the client reads again, everything arrives, in order.
    got = [(await read_response(reader))[0] for _ in range(400)]
    assert got == list(range(400))
    writer.close()


def test_splitter_is_what_the_session_uses() -> None:
    # Guard against a second framing implementation creeping into the proxy layer.
    import quotagate.proxy.session as session
    import quotagate.proxy.session_core as session_core

    assert session.FrameSplitter is FrameSplitter
    assert issubclass(session_core.StreamingFrameSplitter, FrameSplitter)


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


def fetch_v4(correlation_id: int, client_id: bytes = b"app") -> bytes:
    """The head of a Fetch v4 request: what the proxy peeks at (replica id, max wait); the double
    answers without reading the rest."""
    payload = pack(">hhih", FETCH, 4, correlation_id, len(client_id)) + client_id + pack(">iii", -1, 0, 1)
    return pack(">i", len(payload)) + payload


FETCH = 1


async def start_stalling_broker(port: int, body: bytes, release: asyncio.Event) -> asyncio.Server:
    """Answers each request with `body`, but sends only the first half until `release` is set."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                request = await reader.readexactly(size)
                payload = request[4:8] + body
                response = pack(">i", len(payload)) + payload
                if request[:2] != pack(">h", FETCH):
                    writer.write(response)
                    continue
                writer.write(response[: len(response) // 2])
                await writer.drain()
                await release.wait()
                writer.write(response[len(response) // 2 :])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", port)


async def proxy_before(broker_port: int, quotas: str = "") -> Proxy:
    config = parse_config(
        f'[proxy]\nbootstrap_servers = ["127.0.0.1:{broker_port}"]\nport = {broker_port + 1}\n'
        f"connect_timeout_seconds = 2\nmetadata_refresh_seconds = 3600\n{quotas}"
    )
    proxy = Proxy(config)
    await proxy.start()
    return proxy


@contextlib.asynccontextmanager
async def stalling_rig(
    body: bytes, quotas: str = "", stall: bool = True
) -> AsyncIterator[tuple[Proxy, asyncio.Event, int]]:
    """A stalling broker double and a proxy before it: (proxy, the event that releases the stalled
    halves, the proxy's port). The event is set on the way out, so a failed test never hangs."""
    first = free_port_block(12)
    release = asyncio.Event()
    if not stall:
        release.set()
    broker = await start_stalling_broker(first, body, release)
    proxy = await proxy_before(first, quotas)
    try:
        yield proxy, release, first + 1
    finally:
        release.set()
        await proxy.stop()
        broker.close()


async def test_a_large_fetch_response_reaches_the_client_while_the_broker_still_sends_it() -> None:
    body = pack(">i", 0) + bytes(range(256)) * 4096  # throttle_time_ms, then 1 MiB of "records"
    async with stalling_rig(body) as (_, release, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(fetch_v4(9))
        size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 5), "big")
        assert size == 4 + len(body)
        # Half of the response, before the broker has sent the rest: cut through, not buffered whole.
        first_half = await asyncio.wait_for(reader.readexactly(size // 2 - 8), 5)
        release.set()
        rest = await asyncio.wait_for(reader.readexactly(size - len(first_half)), 5)
        assert first_half + rest == pack(">i", 9) + body
        writer.write(heartbeat(10))  # the connection goes on in step
        assert (await read_response(reader))[0] == 10
        writer.close()


async def test_a_cut_through_fetch_response_carries_the_proxys_throttle_and_mutes() -> None:
    body = pack(">i", 0) + b"r" * 300_000
    # Burst: 10 kB/s × 11 one-second windows = 110 kB, so a 300 kB fetch leaves ~190 kB of debt.
    quotas = '[[quotas]]\nclient_id = "app"\nconsumer_byte_rate = 10000\n'
    async with stalling_rig(body, quotas, stall=False) as (proxy, _, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(fetch_v4(3))
        correlation_id, response = await asyncio.wait_for(read_response(reader), 5)
        assert correlation_id == 3
        throttle_ms = unpack_from(">i", response)[0]
        assert 15_000 < throttle_ms < 25_000, throttle_ms
        assert response[4:] == body[4:]
        (client,) = proxy.clients
        assert client.muted
        writer.close()


async def test_a_proxy_made_response_waits_for_the_cut_through_response_before_it() -> None:
    from kafka.protocol.admin import CreateTopicsRequest

    from quotagate.quotas import ANONYMOUS, QuotaKey

    body = pack(">i", 0) + b"f" * 200_000
    quotas = '[[quotas]]\nclient_id = "app"\ncontroller_mutation_rate = 1\n'
    async with stalling_rig(body, quotas) as (proxy, release, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(fetch_v4(1))
        size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 5), "big")
        first_half = await asyncio.wait_for(reader.readexactly(size // 2 - 8), 5)
        # In debt: the proxy itself refuses the next CreateTopics (v6: strict), while the fetch is half sent.
        proxy.engine.charge(ANONYMOUS, "app", QuotaKey.CONTROLLER_MUTATION_RATE, 1000, proxy.loop.time())
        topic = CreateTopicsRequest.CreatableTopic(
            version=6, name="t", num_partitions=3, replication_factor=1, assignments=[], configs=[]
        )
        create = CreateTopicsRequest(version=6, topics=[topic], timeout_ms=1000, validate_only=False)
        create.with_header(correlation_id=2, client_id="app")
        writer.write(bytes(create.encode(header=True, framed=True)))
        await asyncio.sleep(0.2)
        release.set()
        rest = await asyncio.wait_for(reader.readexactly(size - len(first_half)), 5)
        assert first_half + rest == pack(">i", 1) + body  # nothing slipped into the middle
        correlation_id, refusal = await asyncio.wait_for(read_response(reader), 5)
        assert correlation_id == 2 and b"t" in refusal
        writer.close()


async def test_a_large_response_to_no_request_closes_the_client_at_its_head() -> None:
    first = free_port_block(12)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                request = await reader.readexactly(size)
                payload = request[4:8] + b"\x00\x00"
                writer.write(pack(">i", len(payload)) + payload)
                await writer.drain()
                if request[:2] == pack(">h", HEARTBEAT):
                    await asyncio.sleep(0.2)  # in a read of its own, after the answer has gone out
                    # Then a response nobody asked for, announcing 100 MB, of which 100 kB come.
                    writer.write(pack(">ii", 100_000_000, 99) + b"x" * 100_000)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    broker = await asyncio.start_server(serve, "127.0.0.1", first)
    proxy = await proxy_before(first)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", first + 1)
        writer.write(heartbeat(1))
        assert (await asyncio.wait_for(read_response(reader), 5))[0] == 1
        await assert_closed(reader)  # not after 100 MB have been buffered: there will never be more
    finally:
        await proxy.stop()
        broker.close()


def header_only_request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    payload = pack(">hhih", api_key, version, correlation_id, 3) + b"app" + body
    return pack(">i", len(payload)) + payload


@contextlib.contextmanager
def loop_errors() -> Iterator[list[dict]]:
    """What reaches the event loop's exception handler (an exception out of a protocol callback or
    a task): it must stay empty, every bad frame being handled where it is read."""
    loop = asyncio.get_running_loop()
    seen: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        yield seen
        gc.collect()  # "Task exception was never retrieved" is reported when the task is collected
    finally:
        loop.set_exception_handler(previous)


@pytest.mark.parametrize("version", range(3, 9))
async def test_a_header_only_produce_closes_only_that_client(rig, version: int) -> None:
    _, broker, port = rig
    with loop_errors() as errors:
        good_reader, good_writer = await asyncio.open_connection("127.0.0.1", port)
        good_writer.write(heartbeat(1))
        assert (await read_response(good_reader))[0] == 1
        # Sent at once, the frame is read while the upstream connects and forwarded from that task.
        for bad_reader, bad_writer in [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]:
            bad_writer.write(header_only_request(0, version, 7))
            await assert_closed(bad_reader)
        assert 7 not in broker.received
        good_writer.write(heartbeat(2))
        assert (await read_response(good_reader))[0] == 2
        good_writer.close()
    assert [context.get("exception") for context in errors] == []


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(55, 2), (0, 13), (1, 16), (78, 3), (79, 3)],  # DescribeQuorum, Produce, Fetch, ShareFetch, ShareAcknowledge
)
async def test_a_request_above_the_advertised_version_cap_is_closed_as_the_broker_does(
    rig, api_key: int, version: int
) -> None:
    _, broker, port = rig
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(heartbeat(1))
    assert (await read_response(reader))[0] == 1
    writer.write(header_only_request(api_key, version, 2, body=b"\x01" * 64))
    await assert_closed(reader)
    assert 2 not in broker.received, "the request must never reach the broker"


async def test_requests_pipelined_before_a_refused_one_get_their_answers_before_the_close(rig) -> None:
    """The broker reads one request at a time and answers it before it reads the next: A and B are
    answered, then C (above the advertised version cap) closes the connection."""
    _, broker, port = rig
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(heartbeat(1) + heartbeat(2) + header_only_request(55, 2, 3, body=b"\x01" * 64) + heartbeat(4))
    assert [(await read_response(reader))[0] for _ in range(2)] == [1, 2]
    await assert_closed(reader)
    assert 3 not in broker.received and 4 not in broker.received
