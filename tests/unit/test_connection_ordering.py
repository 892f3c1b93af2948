"""Ordering under cut-through, driven in-process: a client, its upstream pair, fake transports.

Random mixes of small and large Fetch responses (cut through or whole), Heartbeats, and CreateTopics
that the proxy refuses itself (the client is in mutation-quota debt), with the broker's bytes cut at
random places and random unmutes: the client must get exactly one response per request, in order,
each whole, nothing interleaved. The socket-level tests in test_connection.py cover the same paths
with a real event loop; this one explores the orderings they cannot reach on purpose.
"""

from __future__ import annotations

import random
from struct import pack, unpack_from

import pytest
from kafka.protocol.admin import CreateTopicsRequest

from quotagate.config import parse_config
from quotagate.proxy.server import Proxy
from quotagate.quotas import ANONYMOUS, QuotaKey
from tests.in_process import FakeTransport, connected_pair
from tests.unit.test_connection import FETCH, fetch_v4, heartbeat


def create_topics(correlation_id: int) -> bytes:
    topic = CreateTopicsRequest.CreatableTopic(
        version=6, name="t", num_partitions=3, replication_factor=1, assignments=[], configs=[]
    )
    request = CreateTopicsRequest(version=6, topics=[topic], timeout_ms=1000, validate_only=False)
    request.with_header(correlation_id=correlation_id, client_id="app")
    return bytes(request.encode(header=True, framed=True))


def frames(buffer: bytes) -> list[bytes]:
    pos, out = 0, []
    while pos + 4 <= len(buffer):
        size = unpack_from(">i", buffer, pos)[0]
        out.append(buffer[pos : pos + 4 + size])
        pos += 4 + size
    assert pos == len(buffer), "a partial frame"
    return out


class BrokerScript:
    """Answers what the proxy forwarded, in order; hands its bytes out in chunks of any size."""

    def __init__(self, upstream_transport: FakeTransport, rng: random.Random) -> None:
        self.sent_to_broker = upstream_transport
        self.rng = rng
        self.answered = 0
        self.pending = bytearray()

    def answer_new_requests(self) -> None:
        requests = frames(bytes(self.sent_to_broker.data))
        for request in requests[self.answered :]:
            correlation_id = unpack_from(">i", request, 8)[0]
            if unpack_from(">h", request, 4)[0] == FETCH:
                size = self.rng.choice([100, 20_000, 70_000])  # below and above the cut-through size
                body = pack(">i", 0) + bytes([correlation_id % 256]) * size
            else:
                body = b"\x00\x00"
            payload = pack(">i", correlation_id) + body
            self.pending += pack(">i", len(payload)) + payload
        self.answered = len(requests)

    def take(self, size: int) -> bytes:
        chunk = bytes(self.pending[:size])
        del self.pending[:size]
        return chunk


@pytest.mark.parametrize("seed", range(30))
async def test_responses_reach_the_client_whole_and_in_order(seed: int) -> None:
    rng = random.Random(seed)
    config = parse_config(
        '[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\nport = 1\n'
        '[[quotas]]\nclient_id = "app"\ncontroller_mutation_rate = 1\n'
    )
    proxy = Proxy(config)
    # In mutation debt: every CreateTopics is answered by the proxy itself.
    proxy.engine.charge(ANONYMOUS, "app", QuotaKey.CONTROLLER_MUTATION_RATE, 1000, proxy.loop.time())
    client, upstream, client_transport, upstream_transport = connected_pair(proxy)
    broker = BrokerScript(upstream_transport, rng)

    expected: list[int] = []
    for correlation_id in range(1, 301):
        step = rng.random()
        if step < 0.3 and not client.muted:
            build = rng.choice([fetch_v4, heartbeat, create_topics])
            expected.append(correlation_id)
            client.data_received(build(correlation_id))
        elif step < 0.35:
            client.muted_until = 0
            client.unmute()
        else:
            broker.answer_new_requests()
            if broker.pending:
                upstream.data_received(broker.take(rng.choice([1, 3, 10, 60, 64, 100, 5000, 30_000, 100_000])))
    for _ in range(10_000):  # drain: unmute, answer, deliver
        client.muted_until = 0
        client.unmute()
        broker.answer_new_requests()
        if not broker.pending:
            break
        upstream.data_received(broker.take(7000))

    assert not client_transport.closed
    received = frames(bytes(client_transport.data))
    assert [unpack_from(">i", frame, 4)[0] for frame in received] == expected
