"""The connection glue (connection.py over connection_core.py) on each build, against what it declares
it needs of the proxy (`ConnectionContext`): a small double here, no Proxy, loop or socket; the
transports are tests/support/in_process.py's. tests/loopback/test_connection.py runs the same glue
on real sockets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from struct import pack

from quotagate.proxy.connection import ClientConnection
from quotagate.proxy.delay_queue import DelayQueue
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.session import SessionServices
from quotagate.proxy.upstream import Upstream
from quotagate.security.tls import TlsContexts
from tests.support.broker_double import heartbeat
from tests.support.builds import Build
from tests.support.in_process import Clock, FakeTransport, connected_pair
from tests.support.session_double import (
    advertised_brokers,
    frames,
    metadata_answer,
    metadata_request,
    produce,
    services_for,
)


@dataclass
class Context:
    """A ConnectionContext of plain parts. `opened` records each `open_broker_listeners` call with
    what the client had been written by then."""

    services: SessionServices = field(default_factory=services_for)
    loop: Clock = field(default_factory=Clock)  # type: ignore[assignment]
    tls: TlsContexts = field(default_factory=lambda: TlsContexts(None, None))
    upstream: Upstream = field(default_factory=lambda: Upstream(None, connect_timeout=1.0))
    client_transport: FakeTransport | None = None
    opened: list[tuple[list[int], int]] = field(default_factory=list)

    @property
    def metrics(self) -> ProxyMetrics:
        return self.services.metrics

    @property
    def delay_queue(self) -> DelayQueue:
        raise AssertionError("nothing is muted in these tests")

    def session_services(self) -> SessionServices:
        return self.services

    def connection_opened(self, client: ClientConnection) -> bool:
        return True

    def connection_closed(self, client: ClientConnection) -> None:
        pass

    def upstream_unreachable(self, listener: str) -> None:
        raise AssertionError("no broker is connected to in these tests")

    def open_broker_listeners(self, node_ids: list[int]) -> None:
        assert self.client_transport is not None
        self.opened.append((list(node_ids), self.client_transport.written))


def paired(build: Build) -> tuple[Context, ClientConnection, FakeTransport, FakeTransport]:
    """A client connection of `build` paired with its broker connection, on the double."""
    context = Context()
    client, _, client_transport, upstream_transport = connected_pair(context, client_class=build.client)
    context.client_transport = client_transport
    return context, client, client_transport, upstream_transport


def test_the_glue_runs_the_session_of_its_own_build(build: Build) -> None:
    _, client, _, _ = paired(build)
    assert type(client) is build.client
    assert type(client.session) is build.session
    assert type(client.upstream) is build.upstream


def test_a_broker_named_for_the_first_time_gets_its_listener_before_the_answer_naming_it_is_written(
    build: Build,
) -> None:
    context, client, to_client, to_broker = paired(build)
    client.data_received(metadata_request(1))
    assert to_broker.data == metadata_request(1)
    assert client.upstream is not None
    client.upstream.data_received(metadata_answer(1, {1: ("kafka-1", 9092), 5: ("kafka-5", 9092)}))
    assert context.opened == [([1, 5], 0)], "both listeners, before a byte of the answer naming them"
    assert advertised_brokers(bytes(to_client.data)) == {1: ("127.0.0.1", 40001), 5: ("127.0.0.1", 40005)}
    assert client.session.brokers_seen == [], "taken once acted on"
    to_client.data.clear()
    client.data_received(heartbeat(2) + metadata_request(3))
    client.upstream.data_received(pack(">ii", 6, 2) + b"\x00\x00" + metadata_answer(3, {5: ("kafka-5", 9092)}))
    assert len(context.opened) == 1, "a broker seen before opens nothing"
    assert len(frames(bytes(to_client.data))) == 2


def test_a_broker_named_before_bad_bytes_from_the_broker_still_gets_its_listener(build: Build) -> None:
    context, client, to_client, to_broker = paired(build)
    client.data_received(metadata_request(1) + heartbeat(2))
    assert client.upstream is not None
    # The answer to 1 names broker 7; what follows answers no request: the pair is closed for it.
    client.upstream.data_received(metadata_answer(1, {7: ("kafka-7", 9092)}) + pack(">ii", 6, 99) + b"\x00\x00")
    assert [ids for ids, _ in context.opened] == [[7]], "the proxy knows broker 7 now: it must serve it"
    assert to_client.closed and to_broker.closed


@dataclass
class MutingContext(Context):
    """A Context whose delay queue records what it is asked to wake."""

    woken: list[tuple[object, Callable[[], None]]] = field(default_factory=list)

    @property
    def delay_queue(self) -> DelayQueue:
        return self  # type: ignore[return-value]  # `wake` is all the glue uses of it

    def wake(self, muted: object, unmute: Callable[[], None]) -> None:
        self.woken.append((muted, unmute))


def test_a_client_in_debt_is_paused_handed_to_the_delay_queue_and_read_again_when_woken(build: Build) -> None:
    context = MutingContext(services=services_for('[[quotas]]\nclient_id = "app"\nproducer_byte_rate = 1000\n'))
    client, _, client_transport, to_broker = connected_pair(context, client_class=build.client)
    context.client_transport = client_transport
    client.data_received(produce(1, {"t": b"r" * 20_000}))  # 20 kB over an 11 kB burst at 1000 B/s
    assert len(frames(bytes(to_broker.data))) == 1, "appended, then throttled (Kafka's order)"
    assert client.muted and client.flow.paused
    assert [muted for muted, _ in context.woken] == [client.flow], "the flow control, handed to the queue"
    context.loop.now = client.flow.muted_until - 0.001
    assert client.muted
    context.loop.now = client.flow.muted_until
    context.woken[0][1]()  # the queue's call once muted_until has passed
    assert not client.muted and not client.flow.paused
