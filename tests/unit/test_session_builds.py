"""The session core's two builds against each other, compiled (session_core_c) and interpreted
(session_core, from the same source), on random streams cut at random places.

Two sessions with the same configuration, one of each build, are fed the same random streams of
client and broker bytes, cut at the same random places, at the same times: a request of every API
with a policy in the core's table (Produce v3-v12, acks 1/-1/0, transactional or not, small and over
quota, responses with and without KIP-951 endpoints and upstream throttles; Fetch, answers small and
cut through; ShareFetch, answers naming a broker; CreateTopics, DeleteTopics and CreatePartitions
under a mutation quota; DescribeClientQuotas and AlterClientQuotas answered by the proxy; a
re-authentication's SaslHandshake and SaslAuthenticate; the cluster APIs Kafka exempts; produce
under per-topic thresholds: test_the_streams_hold_a_request_of_every_api_with_a_policy_and_a_plain_one
keeps it so), a plain API (Heartbeat), requests above the advertised cap, reads cut at random places
and reads of many frames, with usage records off, as aggregates and per request.
After every step each side's bytes, the mute and what is held must be equal; at the end so are every
counter, every entity's metrics, every bucket and every usage record. Then hostile bytes
(hypothesis' truncations, flips, inflated counts and noise, as in test_protocol_fuzz.py): requests,
and produce responses; each must be refused, or passed, exactly alike.

Where this process runs no compiled build (QUOTAGATE_NO_EXTENSIONS=1), both sessions are
interpreted: the streams still go through the one loop per direction, cut anywhere. How a stream's
frames are found is tests/unit/test_frames.py's.
"""

from __future__ import annotations

import random
from dataclasses import replace
from struct import pack, unpack_from

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClientQuotasRequest,
)
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from quotagate.config.settings import UsageConfig
from quotagate.protocol.apis import ApiKey, is_flexible, response_header_is_flexible
from quotagate.proxy.quota_admin import QuotaAdmin
from quotagate.proxy.session import Session
from quotagate.proxy.usage import UsageRecorder
from quotagate.quotas import apis
from tests.support.broker_double import FETCH, fetch_v4, header_only_request, heartbeat
from tests.support.builds import COMPILED, INTERPRETED, Build
from tests.support.builds import build as build_named
from tests.support.fuzz import FUZZ, bad_frames, header_only, produce_request
from tests.support.messages import produce_response
from tests.support.session_double import create_topics, frames, services_for, taken
from tests.support.share_messages import GOLDEN, share_fetch_request

PRODUCE = 0
CONFIGS = {
    "no_quota": "",
    "binding": (
        '[[quotas]]\nclient_id = "app"\nproducer_byte_rate = 20000\nconsumer_byte_rate = 50000\n'
        "request_percentage = 5\ncontroller_mutation_rate = 1\n"
        '[[quotas]]\nuser = "<default>"\nproducer_byte_rate = 40000\n'
    ),
    "not_binding": (
        '[[quotas]]\nuser = "<default>"\nclient_id = "<default>"\n'
        "producer_byte_rate = 1e10\nconsumer_byte_rate = 1e10\nrequest_percentage = 10000\n"
    ),
    "shadow": '[[quotas]]\nclient_id = "app"\nproducer_byte_rate = 20000\nshadow = true\n',
    "thresholds": (
        '[[quotas]]\nclient_id = "app"\nproducer_byte_rate = 20000\n'
        "[topic_thresholds]\ntotal_bytes_in_per_sec = 3000\n[topic_thresholds.topics]\na = 1000\n"
    ),
}
USAGE = {"usage_off": None, "aggregates": "aggregate", "per_request": "request"}


class KeptRows:
    """A usage sink that is never flushed: the collectors are compared instead."""

    async def write(self, rows: list) -> None:  # type: ignore[type-arg]
        raise AssertionError("not flushed in these tests")

    async def close(self) -> None:
        pass


def produce(correlation_id: int, rng: random.Random) -> bytes:
    version = rng.choice([3, 7, 8, 9, 10, 12])
    request = ProduceRequest(
        version=version,
        transactional_id=rng.choice([None, "tx-1"]),
        acks=rng.choice([1, 1, 1, -1, 0]) if rng.random() < 0.2 else 1,
        timeout_ms=1000,
        topic_data=[(name, [(0, b"r" * rng.choice([10, 300, 5000]))]) for name in rng.sample(["a", "b", "c"], 2)],
    )
    request.with_header(correlation_id=correlation_id, client_id=rng.choice(["app", "app", "other", ""]))
    return bytes(request.encode(header=True, framed=True))


def answer(request: bytes, rng: random.Random) -> bytes:
    """What a broker answers `request` with (any body will do where the proxy reads only the head)."""
    api_key, version, correlation_id = unpack_from(">hhi", request, 4)
    if api_key == PRODUCE:
        response = produce_response(
            version,
            throttle=rng.choice([0, 0, 0, 250]),
            endpoints=version >= 10 and rng.random() < 0.3,
            topics=rng.choice([1, 2]),
            partitions=rng.choice([1, 1, 3]) if version >= 8 else 1,
        )
        header = pack(">i", correlation_id) + (b"\x00" if version >= 9 else b"")
        payload = header + bytes(response.encode())
    elif api_key == FETCH:
        size = rng.choice([100, 100, 20_000, 70_000])  # below and above the cut-through size
        payload = pack(">ii", correlation_id, 0) + bytes([correlation_id % 256]) * size
    elif api_key == ApiKey.SHARE_FETCH:  # Kafka's own bytes, naming a broker in NodeEndpoints (NOT_LEADER)
        payload = pack(">i", correlation_id) + b"\x00" + GOLDEN[(ApiKey.SHARE_FETCH, version)]
    elif api_key in ANSWERS:
        header = pack(">i", correlation_id) + (b"\x00" if response_header_is_flexible(api_key, version) else b"")
        payload = header + bytes(ANSWERS[api_key](version, rng).encode())
    elif api_key == 12:  # Heartbeat v0
        payload = pack(">i", correlation_id) + b"\x00\x00"
    elif api_key in EXEMPT_APIS:  # what the proxy reads of them is the header
        payload = (
            pack(">i", correlation_id) + (b"\x00" if response_header_is_flexible(api_key, 0) else b"") + b"\x00\x00"
        )
    else:  # CreateTopics v6 in the shape the proxy reads: one topic, no error
        payload = pack(">i", correlation_id) + created_body()
    return pack(">i", len(payload)) + payload


def sasl_handshake_answer(version: int, rng: random.Random) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(version=version, error_code=0, mechanisms=["PLAIN"])


def sasl_authenticate_answer(version: int, rng: random.Random) -> SaslAuthenticateResponse:
    """Success (a failure ends the connection at the broker; test_session_authentication.py has those)."""
    return SaslAuthenticateResponse(
        version=version, error_code=0, error_message=None, auth_bytes=b"", session_lifetime_ms=0
    )


def deleted(version: int, rng: random.Random) -> DeleteTopicsResponse:
    entry = DeleteTopicsResponse.DeletableTopicResult
    return DeleteTopicsResponse(
        version=version, throttle_time_ms=0, responses=[entry(version=version, name="t", error_code=0)]
    )


def partitions_created(version: int, rng: random.Random) -> CreatePartitionsResponse:
    entry = CreatePartitionsResponse.CreatePartitionsTopicResult
    return CreatePartitionsResponse(
        version=version, throttle_time_ms=0, results=[entry(version=version, name="t", error_code=0)]
    )


ANSWERS = {
    ApiKey.SASL_HANDSHAKE: sasl_handshake_answer,
    ApiKey.SASL_AUTHENTICATE: sasl_authenticate_answer,
    ApiKey.DELETE_TOPICS: deleted,
    ApiKey.CREATE_PARTITIONS: partitions_created,
}
# The APIs Kafka exempts from request-time quotas, besides SASL's: the cluster's own.
EXEMPT_APIS = sorted(apis.CLUSTER_ACTIONS)


def created_body() -> bytes:
    topic = CreateTopicsResponse.CreatableTopicResult
    response = CreateTopicsResponse(
        version=6,
        throttle_time_ms=0,
        topics=[topic(version=6, name="t", error_code=0, error_message=None, num_partitions=3, replication_factor=1)],
    )
    return b"\x00" + bytes(response.encode())


def acks_zero(request: bytes) -> bool:
    api_key, version = unpack_from(">hh", request, 4)
    if api_key != PRODUCE:
        return False
    client_id_length = unpack_from(">h", request, 12)[0]
    pos = 14 + max(client_id_length, 0) + (1 if version >= 9 else 0)
    if version >= 3:
        if version >= 9:
            pos += 1 + max(request[pos] - 1, 0)
        else:
            pos += 2 + max(unpack_from(">h", request, pos)[0], 0)
    return unpack_from(">h", request, pos)[0] == 0


def session(build: Build, config: str, usage: str | None) -> Session:
    services = services_for(config)
    engine = services.engine
    admin = QuotaAdmin(engine.table, {}, (), None, lambda quotas, now: engine.update(quotas, engine.windows, now))
    recorder = None
    if usage is not None:
        recorder = UsageRecorder(UsageConfig(enabled=True, records=usage), services.metrics, KeptRows(), "p", "w")
    return build.session(replace(services, usage=recorder, quota_admin=admin))


class Pair:
    """The same configuration twice: a session of the build this process loaded (compiled where it
    can be), and one of the same source interpreted."""

    def __init__(self, config: str, usage: str | None = None) -> None:
        loaded = build_named(COMPILED) or build_named(INTERPRETED)
        interpreted = build_named(INTERPRETED)
        assert loaded is not None and interpreted is not None
        self.lane = session(loaded, config, usage)
        self.general = session(interpreted, config, usage)
        self.sessions = (self.lane, self.general)
        self.to_broker = bytearray()
        self.to_client = bytearray()

    def call(self, method: str, *args: object) -> None:
        results = []
        for session in self.sessions:
            try:
                getattr(session, method)(*args)
                results.append(None)
            except Exception as exc:  # a FrameError from broker_data: both must raise it
                results.append(type(exc))
        assert results[0] == results[1], f"{method}: loaded build {results[0]}, interpreted {results[1]}"
        self.compare()

    def compare(self) -> None:
        lane, general = self.sessions
        to_broker = taken(lane.to_broker)
        assert to_broker == taken(general.to_broker)
        self.to_broker += to_broker
        to_client = taken(lane.to_client)
        assert to_client == taken(general.to_client)
        self.to_client += to_client
        assert lane.muted_until == general.muted_until
        assert lane.holding == general.holding
        assert lane.refusal == general.refusal
        assert len(lane.in_flight) == len(general.in_flight)
        assert lane.awaiting_answers == general.awaiting_answers

    def compare_counters(self) -> None:
        lane, general = (session.services for session in self.sessions)
        counted, other = lane.metrics.counters, general.metrics.counters
        assert (counted.bytes_in, counted.bytes_out) == (other.bytes_in, other.bytes_out)
        assert counted.requests_by_key() == other.requests_by_key()
        assert counted.latency_by_key() == other.latency_by_key()
        assert lane.entity_metrics.stats == general.entity_metrics.stats
        assert lane.entity_metrics.exempt_request_seconds == general.entity_metrics.exempt_request_seconds
        buckets = {key: (b.tokens, b.updated, type(b)) for key, b in lane.engine.buckets.items()}
        assert buckets == {key: (b.tokens, b.updated, type(b)) for key, b in general.engine.buckets.items()}
        if lane.usage is not None:
            assert general.usage is not None
            collected = lane.usage.collector
            other = general.usage.collector
            assert getattr(collected, "aggregates", None) == getattr(other, "aggregates", None)
            assert list(getattr(collected, "buffer", ())) == list(getattr(other, "buffer", ()))


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("seed", range(12))
def test_both_builds_answer_the_same_streams_cut_anywhere_the_same(config: str, seed: int) -> None:
    rng = random.Random(seed)
    pair = Pair(CONFIGS[config], USAGE[list(USAGE)[seed % 3]])
    now = 0.0
    pair.call("broker_connected", now)
    answered = 0
    broker_pending = bytearray()
    correlation_id = 0
    builders = BUILDERS + [produce] * 16 + [fetch, beat] * 6  # re-authentications stay rare, as in life
    for index in range(400):
        now += rng.choice([0.0, 0.0005, 0.002, 0.05])
        step = rng.random()
        if index == 350 and seed % 3 == 0:  # late in a third of the runs: one the broker closes for
            builders.append(above_cap)
        if step < 0.45 and pair.lane.muted_until <= now:
            reads = bytearray()
            for _ in range(rng.choice([1, 1, 1, 2, 5])):
                correlation_id += 1
                reads += rng.choice(builders)(correlation_id, rng)
            cut = rng.choice([len(reads)] * 4 + [rng.randrange(1, len(reads) + 1)])
            pair.call("client_data", bytes(reads[:cut]), now)
            if cut < len(reads):
                pair.call("client_data", bytes(reads[cut:]), now)
        elif step < 0.5:
            now = max(now, pair.lane.muted_until)
            pair.call("unmute", now)
        else:
            requests = frames(bytes(pair.to_broker))
            for request in requests[answered:]:
                if not acks_zero(request):
                    broker_pending += answer(request, rng)
            answered = len(requests)
            if broker_pending:
                size = rng.choice([len(broker_pending)] * 3 + [1, 7, 64, 100, 5000, 30_000])
                chunk = bytes(broker_pending[:size])
                del broker_pending[:size]
                pair.call("broker_data", chunk, now)
        if pair.lane.refusal is not None and not pair.lane.awaiting_answers:
            break
    pair.compare_counters()


def fetch(correlation_id: int, rng: random.Random) -> bytes:
    return fetch_v4(correlation_id, client_id=rng.choice([b"app", b"other"]))


def beat(correlation_id: int, rng: random.Random) -> bytes:
    return heartbeat(correlation_id)


def mutation(correlation_id: int, rng: random.Random) -> bytes:
    return create_topics(correlation_id)


def quotas_described(correlation_id: int, rng: random.Random) -> bytes:
    """DescribeClientQuotas: answered by the proxy, in its turn."""
    cls = DescribeClientQuotasRequest
    request = cls(
        version=1,
        components=[cls.ComponentData(version=1, entity_type="client-id", match_type=0, match="app")],
        strict=False,
    )
    request.with_header(correlation_id=correlation_id, client_id=rng.choice(["app", "other"]))
    return bytes(request.encode(header=True, framed=True))


def share_fetch(correlation_id: int, rng: random.Random) -> bytes:
    return share_fetch_request(correlation_id, max_wait_ms=rng.choice([0, 500]), version=rng.choice([1, 2]))


def framed(request: object, correlation_id: int, rng: random.Random) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=rng.choice(["app", "other"]))  # type: ignore[attr-defined]
    return bytes(request.encode(header=True, framed=True))  # type: ignore[attr-defined]


def sasl_handshake(correlation_id: int, rng: random.Random) -> bytes:
    """A re-authentication's first step (KIP-368)."""
    return framed(SaslHandshakeRequest(version=1, mechanism="PLAIN"), correlation_id, rng)


def sasl_authenticate(correlation_id: int, rng: random.Random) -> bytes:
    """PLAIN as alice or bob: what the client sends after it is held until the broker answers."""
    user = rng.choice([b"alice", b"bob"])
    return framed(SaslAuthenticateRequest(version=1, auth_bytes=b"\0" + user + b"\0secret"), correlation_id, rng)


def quotas_altered(correlation_id: int, rng: random.Random) -> bytes:
    """AlterClientQuotas: answered by the proxy, in its turn (refused here: no alter_principals)."""
    cls = AlterClientQuotasRequest.EntryData
    entry = cls(
        version=1,
        entity=[cls.EntityData(version=1, entity_type="client-id", entity_name="app")],
        ops=[cls.OpData(version=1, key="producer_byte_rate", value=5000.0, remove=False)],
    )
    return framed(AlterClientQuotasRequest(version=1, entries=[entry], validate_only=False), correlation_id, rng)


def topics_deleted(correlation_id: int, rng: random.Random) -> bytes:
    return framed(DeleteTopicsRequest(version=4, topic_names=["t"], timeout_ms=1000), correlation_id, rng)


def partitions_added(correlation_id: int, rng: random.Random) -> bytes:
    topic = CreatePartitionsRequest.CreatePartitionsTopic
    request = CreatePartitionsRequest(
        version=3, topics=[topic(version=3, name="t", count=5, assignments=None)], timeout_ms=1000, validate_only=False
    )
    return framed(request, correlation_id, rng)


def exempt(correlation_id: int, rng: random.Random) -> bytes:
    """One of the cluster's own APIs, v0, header only (the proxy reads nothing else of it)."""
    api_key = rng.choice(EXEMPT_APIS)
    payload = pack(">hhih", api_key, 0, correlation_id, 3) + b"app" + (b"\x00" if is_flexible(api_key, 0) else b"")
    return pack(">i", len(payload)) + payload


# What the streams are made of: a request of every API with a policy in the core's table, and a plain one.
BUILDERS = [
    produce,
    produce,
    produce,
    fetch,
    share_fetch,
    beat,
    beat,
    mutation,
    topics_deleted,
    partitions_added,
    quotas_described,
    quotas_altered,
    sasl_handshake,
    sasl_authenticate,
    exempt,
]


def test_the_streams_hold_a_request_of_every_api_with_a_policy_and_a_plain_one() -> None:
    rng = random.Random(0)
    sent = {unpack_from(">h", builder(1, rng), 4)[0] for builder in BUILDERS for _ in range(200)}
    missing = set(apis.APIS) - sent
    assert not missing, f"no request of {sorted(missing)} in the streams: add a builder"
    assert any(apis.policy(key) == apis.DEFAULT_POLICY for key in sent), "and one of an API with no policy"


def above_cap(correlation_id: int, rng: random.Random) -> bytes:
    """A request the broker closes the connection for (DescribeQuorum v2: above the cap)."""
    return header_only_request(55, 2, correlation_id, body=b"\x01" * 64)


def test_a_read_of_whole_frames_goes_to_the_broker_as_it_was_read(build: Build) -> None:
    """The zero-copy read: a read that holds only whole frames, all forwarded as they are, is written
    to the broker as the very bytes object read (no slice, no copy), and so is its answer."""
    session = build.session(services_for(CONFIGS["not_binding"]))
    session.broker_connected(0.0)
    session.client_data(heartbeat(1), 0.0)  # the first request that is not ApiVersions or SASL
    session.broker_data(answer(heartbeat(1), random.Random(0)), 0.001)
    taken(session.to_broker), taken(session.to_client)
    request = produce(2, random.Random(1))
    while acks_zero(request):
        request = produce(2, random.Random(len(request)))
    session.client_data(request, 0.002)
    assert len(session.to_broker) == 1 and session.to_broker[0] is request
    taken(session.to_broker)
    reads = heartbeat(3) + heartbeat(4)
    session.client_data(reads, 0.003)
    assert session.to_broker == [reads] and session.to_broker[0] is reads


# hostile bytes: each build must refuse, or pass, exactly what the other does

FUZZ_SEEDS = [produce_request(v) for v in range(3, 13)] + [
    bytes(fetch_v4(7))[4:],
    bytes(heartbeat(7))[4:],
    header_only(0, 9),
    header_only(1, 12),
]


@FUZZ
@given(frame=bad_frames(FUZZ_SEEDS), config=st.sampled_from(sorted(CONFIGS)))
def test_a_hostile_request_gets_the_same_answer_from_both_builds(frame: memoryview, config: str) -> None:
    pair = Pair(CONFIGS[config])
    pair.call("broker_connected", 0.0)
    pair.call("client_data", heartbeat(1), 0.0)  # past authentication: the lane is open
    pair.call("broker_data", answer(heartbeat(1), random.Random(0)), 0.001)
    pair.call("client_data", bytes(frame) + heartbeat(2), 0.002)
    pair.call("client_data", bytes(frame), 0.003)
    pair.compare_counters()


def produce_response_bodies(version: int) -> list[bytes]:
    return [
        bytes(produce_response(version, throttle, endpoints, topics, partitions).encode())
        for throttle, endpoints, topics, partitions in [(0, False, 1, 1), (0, True, 2, 3), (30, False, 2, 1)]
        if version >= 10 or not endpoints
    ]


@FUZZ
@given(
    version=st.sampled_from([3, 7, 8, 9, 10, 12]),
    data=st.data(),
    config=st.sampled_from(sorted(CONFIGS)),
)
def test_a_hostile_response_gets_the_same_treatment_from_both_builds(
    version: int, data: st.DataObject, config: str
) -> None:
    request = ProduceRequest(version=version, transactional_id=None, acks=1, timeout_ms=1000,
                             topic_data=[("a", [(0, b"r" * 10)])])  # fmt: skip
    request.with_header(correlation_id=5, client_id="app")
    body = data.draw(bad_frames(produce_response_bodies(version)))[4:]  # hypothesis' cuts and flips
    header = pack(">i", 5) + (b"\x00" if version >= 9 else b"")
    response = pack(">i", len(header) + len(body)) + header + bytes(body)
    pair = Pair(CONFIGS[config])
    pair.call("broker_connected", 0.0)
    pair.call("client_data", heartbeat(1), 0.0)
    pair.call("broker_data", answer(heartbeat(1), random.Random(0)), 0.001)
    pair.call("client_data", bytes(request.encode(header=True, framed=True)), 0.002)
    pair.call("broker_data", response, 0.003)
    pair.compare_counters()


def test_the_core_is_compiled_unless_told_not_to() -> None:
    """Where the install compiled it (every `make` venv), the compiled core runs; QUOTAGATE_NO_EXTENSIONS=1
    (make test's second pass over the unit tests) runs the same sources interpreted."""
    from quotagate import compiled

    assert compiled.COMPILED is not compiled.NO_EXTENSIONS
    assert Session.__module__ == (
        "quotagate.proxy.session_core_c" if compiled.COMPILED else "quotagate.proxy.session_core"
    )
