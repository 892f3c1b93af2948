"""The connection glue (connection.py over connection_core.py) on each build, against what it declares
it needs of the proxy (`ConnectionContext`): a small double here, no Proxy, loop or socket. The
transports are doubles of this one layer that keep what is written; tests/loopback/test_connection.py
runs the same glue on real sockets."""

from __future__ import annotations

from dataclasses import dataclass, field
from struct import pack

from quotagate.proxy.connection import ClientConnection, ConnectionContext
from quotagate.proxy.delay_queue import DelayQueue
from quotagate.proxy.flow_control import ReadGate
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.session import SessionServices
from quotagate.security.tls import TlsContexts
from tests.support.broker_double import heartbeat
from tests.support.builds import Build
from tests.support.session_double import (
    advertised_brokers,
    frames,
    metadata_answer,
    metadata_request,
    services_for,
)

Event = tuple[str, object]


class Clock:
    """The part of the event loop the glue reads here: its clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def time(self) -> float:
        return self.now


@dataclass
class Context:
    """A ConnectionContext of plain parts, recording what the glue asks of the proxy in `events`."""

    events: list[Event]
    services: SessionServices = field(default_factory=services_for)
    loop: Clock = field(default_factory=Clock)  # type: ignore[assignment]
    tls: TlsContexts = field(default_factory=lambda: TlsContexts(None, None))
    connect_timeout_seconds: float = 1.0

    @property
    def metrics(self) -> ProxyMetrics:
        return self.services.metrics

    @property
    def delay_queue(self) -> DelayQueue:
        raise AssertionError("nothing is muted in these tests")

    def session_services(self) -> SessionServices:
        return self.services

    def connection_opened(self, client: ClientConnection) -> bool:
        self.events.append(("opened", client.listener))
        return True

    def connection_closed(self, client: ClientConnection) -> None:
        self.events.append(("closed", client.listener))

    def upstream_unreachable(self, listener: str) -> None:
        self.events.append(("unreachable", listener))

    def open_broker_listeners(self, node_ids: list[int]) -> None:
        self.events.append(("listeners opened", list(node_ids)))


class Transport:
    """A transport that records what is written to it, and its closes, in `events` under `side`."""

    def __init__(self, side: str, events: list[Event]) -> None:
        self.side = side
        self.events = events
        self.closing = False

    def write(self, data: bytes | memoryview) -> None:
        self.events.append((self.side, bytes(data)))

    def writelines(self, chunks: list[bytes | memoryview]) -> None:
        self.write(b"".join(chunks))

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True
        self.events.append((self.side, "closed"))

    def abort(self) -> None:
        self.closing = True
        self.events.append((self.side, "aborted"))


def paired(build: Build, events: list[Event]) -> ClientConnection:
    """A client connection of `build` paired with its broker connection, both on recording transports."""
    context: ConnectionContext = Context(events)
    client = build.client(context, "bootstrap", [("kafka-1", 9092)])
    client.transport = Transport("client", events)  # type: ignore[assignment]
    client.reading = ReadGate(client.transport)
    upstream = build.upstream(client)
    upstream.transport = Transport("broker", events)  # type: ignore[assignment]
    upstream.reading = ReadGate(upstream.transport)
    client.upstream = upstream
    client.session.broker_connected(0.0)
    return client


def test_the_glue_runs_the_session_of_its_own_build(build: Build) -> None:
    client = paired(build, [])
    assert type(client.session) is build.session
    assert type(client.upstream) is build.upstream


def test_a_broker_named_for_the_first_time_gets_its_listener_before_the_answer_naming_it_is_written(
    build: Build,
) -> None:
    events: list[Event] = []
    client = paired(build, events)
    client.data_received(metadata_request(1))
    assert events == [("broker", metadata_request(1))]
    events.clear()
    assert client.upstream is not None
    client.upstream.data_received(metadata_answer(1, {1: ("kafka-1", 9092), 5: ("kafka-5", 9092)}))
    (opened, (side, answer)) = events
    assert opened == ("listeners opened", [1, 5]), "the listeners first"
    assert side == "client" and isinstance(answer, bytes)
    assert advertised_brokers(answer) == {1: ("127.0.0.1", 40001), 5: ("127.0.0.1", 40005)}
    assert client.session.brokers_seen == [], "taken once acted on"
    events.clear()
    client.data_received(heartbeat(2) + metadata_request(3))
    client.upstream.data_received(pack(">ii", 6, 2) + b"\x00\x00" + metadata_answer(3, {5: ("kafka-5", 9092)}))
    assert [kind for kind, _ in events] == ["broker", "client"], "a broker seen before opens nothing"
    assert frames(events[-1][1])[0] == pack(">ii", 6, 2) + b"\x00\x00", "the heartbeat's answer, then metadata's"  # type: ignore[arg-type]


def test_a_broker_named_before_bad_bytes_from_the_broker_still_gets_its_listener(build: Build) -> None:
    events: list[Event] = []
    client = paired(build, events)
    client.data_received(metadata_request(1) + heartbeat(2))
    events.clear()
    assert client.upstream is not None
    # The answer to 1 names broker 7; what follows answers no request: the pair is closed for it.
    client.upstream.data_received(metadata_answer(1, {7: ("kafka-7", 9092)}) + pack(">ii", 6, 99) + b"\x00\x00")
    assert ("listeners opened", [7]) in events, "the proxy knows broker 7 now: it must serve it"
    assert ("client", "aborted") in events and ("broker", "aborted") in events
