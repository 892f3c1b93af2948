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
from quotagate.protocol.frames import frame_end, splitter
from quotagate.proxy.server import Proxy
from tests.support.broker_double import (
    FETCH,
    HEARTBEAT,
    BrokerDouble,
    assert_closed,
    fetch_v4,
    header_only_request,
    heartbeat,
    read_response,
)
from tests.support.builds import BUILDS, Build, build_or_skip
from tests.support.proxy_fixtures import free_port_block
from tests.support.session_double import advertised_brokers, metadata_answer, metadata_request


@pytest.fixture(autouse=True, params=BUILDS)
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Build:
    """Every test here runs on both builds of the glue and its session: each proxy accepts with them."""
    classes = build_or_skip(request.param)
    monkeypatch.setattr(Proxy, "client_class", classes.client)
    return classes


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
    (client,) = proxy.admission.clients
    assert type(client) is Proxy.client_class
    assert client.upstream is not None and client.upstream.flow.paused
    # What the proxy holds for this client stays near its write-buffer limit, not 25 MiB.
    held = client.transport.get_write_buffer_size() + client.session.broker_frames.buffered
    assert held < 4 * 1024 * 1024, held
    # Once the client reads again, everything arrives, in order.
    got = [(await read_response(reader))[0] for _ in range(400)]
    assert got == list(range(400))
    writer.close()


def test_splitter_is_what_the_session_uses() -> None:
    # Guard against a second framing implementation creeping into the proxy layer.
    import quotagate.proxy.session_core as session_core

    assert session_core.splitter is splitter and session_core.frame_end is frame_end


async def test_a_broker_named_later_gets_a_listener_bound_before_the_answer_leaves(rig) -> None:
    """A Metadata answer naming a broker the proxy has not seen: the session reports it, the proxy
    binds its listener, and only then is the rewritten answer written, so the client connects at once."""
    proxy, rig_broker, port = rig
    late_node = 5
    real_port = free_port_block(1)
    broker = BrokerDouble()
    await broker.start(real_port)
    try:
        assert late_node not in proxy.listeners.ports
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        rig_broker.response_body = metadata_answer(0, {late_node: ("127.0.0.1", real_port)})[8:]
        writer.write(metadata_request(76))
        correlation_id, body = await read_response(reader)
        assert correlation_id == 76
        advertised = advertised_brokers(pack(">ii", 4 + len(body), 76) + body)
        assert advertised == {late_node: ("127.0.0.1", proxy.config.proxy.broker_port(late_node))}
        # No await between the answer and the connect that could have let a listener be opened late.
        late_reader, late_writer = await asyncio.open_connection(*advertised[late_node])
        late_writer.write(heartbeat(77))
        assert (await read_response(late_reader))[0] == 77
        assert broker.received == [77]
        late_writer.close()
        writer.close()
    finally:
        await broker.stop()


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
        (client,) = proxy.admission.clients
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
