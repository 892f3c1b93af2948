"""The session alone: bytes and `now` in, bytes and mutes out; no sockets, no loop turning, no sleeps.

Tables of (what the client and the broker send, when) -> (what reaches each side, the mute), and a
random interleaving test that checks every order invariant at once: random mixes of small and large
Fetch responses (cut through or whole), Heartbeats, and CreateTopics that the session refuses itself
(the client is in mutation-quota debt), with the broker's bytes cut at random places and random
unmutes. The socket-level tests in test_connection.py prove the glue (backpressure, closes).
"""

from __future__ import annotations

import random
from struct import pack, unpack_from

import pytest
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.producer import ProduceResponse

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.version_caps import unsupported_api_versions
from quotagate.proxy.flow_control import ByteBudget
from quotagate.proxy.metrics import PARTIAL_FRAMES_LIMIT
from quotagate.proxy.session import PROTOCOL_ERROR, TOPIC_THRESHOLD_ERROR
from quotagate.quotas import ANONYMOUS, QuotaKey
from tests.support.broker_double import FETCH, fetch_v4, header_only_request, heartbeat
from tests.support.builds import Build
from tests.support.session_double import (
    advertised_brokers,
    correlation_ids,
    create_topics,
    frames,
    metadata_answer,
    metadata_request,
    produce,
    produce_answer,
    services_for,
    taken,
)


def test_a_produce_that_leaves_the_client_in_debt_goes_on_and_what_follows_waits_for_the_mute(build: Build) -> None:
    # Burst: 1000 B/s × 11 windows = 11 kB; a 20 kB produce leaves ~9 kB of debt, ~9 s.
    session, _ = build.session_with('[[quotas]]\nclient_id = "app"\nproducer_byte_rate = 1000\n')
    session.client_data(produce(1, {"t": b"r" * 20_000}) + heartbeat(2) + heartbeat(3), now=10.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1]  # appended, then throttled (Kafka's order)
    assert 18.5 < session.muted_until < 19.5, session.muted_until
    session.client_data(heartbeat(4), now=11.0)  # a read that landed after the mute: held too
    assert session.holding and not session.to_broker
    session.unmute(now=session.muted_until)
    assert correlation_ids(taken(session.to_broker), 8) == [2, 3, 4]
    assert not session.holding
    # The produce's response carries the throttle as it stands when it comes back.
    session.broker_data(produce_answer(1, ["t"]), now=12.0)
    (answer,) = frames(taken(session.to_client))
    assert 6500 < unpack_from(">i", answer, len(answer) - 4)[0] < 7500


def test_requests_read_before_the_broker_is_connected_are_held_in_order(build: Build) -> None:
    session = build.session(services_for())
    session.client_data(heartbeat(1) + heartbeat(2)[:7], now=0.0)
    session.client_data(heartbeat(2)[7:], now=0.0)
    assert session.holding and not session.to_broker
    session.broker_connected(now=0.1)
    assert correlation_ids(taken(session.to_broker), 8) == [1, 2]


def test_a_proxy_made_response_waits_behind_the_response_being_cut_through(build: Build) -> None:
    session, engine = build.session_with('[[quotas]]\nclient_id = "app"\ncontroller_mutation_rate = 1\n')
    session.client_data(fetch_v4(1), now=0.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1]
    fetch_answer = pack(">i", 1) + pack(">i", 0) + b"f" * 100_000
    fetch_answer = pack(">i", len(fetch_answer)) + fetch_answer
    session.broker_data(fetch_answer[:50_000], now=0.1)
    assert taken(session.to_client) == fetch_answer[:50_000]  # cut through: the head is on its way
    # In mutation debt: the next CreateTopics (v6, strict) is answered by the session itself.
    engine.charge(ANONYMOUS, "app", QuotaKey.CONTROLLER_MUTATION_RATE, 1000, 0.2)
    session.client_data(create_topics(2), now=0.2)
    assert not session.to_broker and not session.to_client  # its turn is after the fetch's last byte
    session.broker_data(fetch_answer[50_000:], now=0.3)
    received = fetch_answer[:50_000] + taken(session.to_client)
    assert correlation_ids(received, 4) == [1, 2]
    assert received[: len(fetch_answer)] == fetch_answer


def test_a_cut_through_fetch_head_carries_the_throttle_and_mutes(build: Build) -> None:
    # Burst: 10 kB/s × 11 windows = 110 kB, so a 300 kB fetch leaves ~190 kB of debt, ~19 s.
    session, _ = build.session_with('[[quotas]]\nclient_id = "app"\nconsumer_byte_rate = 10000\n')
    session.client_data(fetch_v4(3), now=5.0)
    answer = pack(">i", 3) + pack(">i", 0) + b"r" * 300_000
    session.broker_data(pack(">i", len(answer)) + answer[:1000], now=5.0)
    head = taken(session.to_client)
    assert 18_000 < unpack_from(">i", head, 8)[0] < 20_000
    assert 23.0 < session.muted_until < 25.0


def test_refused_topics_are_merged_into_the_brokers_answer_in_request_order(build: Build) -> None:
    thresholds = "[topic_thresholds]\ntotal_bytes_in_per_sec = 1000\n[topic_thresholds.topics]\nbig = 100\n"
    session, _ = build.session_with(thresholds)
    # Over the total (11 kB of burst) and over its own threshold: "big" is refused from now on.
    session.client_data(produce(1, {"big": b"b" * 12_000}), now=0.0)
    session.broker_data(produce_answer(1, ["big"]), now=0.0)
    taken(session.to_broker), taken(session.to_client)
    muted_until = session.muted_until
    session.unmute(now=muted_until)
    session.client_data(produce(2, {"small": b"s" * 10, "big": b"b" * 10}), now=muted_until)
    (forwarded,) = frames(taken(session.to_broker))
    assert b"small" in forwarded and b"big" not in forwarded
    session.broker_data(produce_answer(2, ["small"]), now=muted_until + 0.001)
    (answer,) = frames(taken(session.to_client))
    response = ProduceResponse.decode(answer[8:], version=8)
    assert [(t.name, t.partition_responses[0].error_code) for t in response.responses] == [
        ("small", 0),
        ("big", TOPIC_THRESHOLD_ERROR),
    ]


def create_topics_of(correlation_id: int, names: list[str], partitions: int) -> bytes:
    topic = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        version=7,
        topics=[
            topic(version=7, name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])
            for n in names
        ],
        timeout_ms=1000,
        validate_only=False,
    )
    request.with_header(correlation_id=correlation_id, client_id="app")
    return bytes(request.encode(header=True, framed=True))


def created(correlation_id: int, names: list[str], partitions: int) -> bytes:
    """A broker's CreateTopics v7 answer: every topic made, no throttle."""
    result = CreateTopicsResponse.CreatableTopicResult
    response = CreateTopicsResponse(
        version=7,
        throttle_time_ms=0,
        topics=[
            result(
                version=7,
                name=n,
                topic_id=None,
                error_code=0,
                error_message=None,
                num_partitions=partitions,
                replication_factor=1,
                configs=[],
            )
            for n in names
        ],
    )
    payload = pack(">i", correlation_id) + b"\x00" + bytes(response.encode())  # header v1: no tags
    return pack(">i", len(payload)) + payload


def test_a_strict_create_whose_topics_were_all_admitted_carries_no_throttle_and_the_next_is_refused(
    build: Build,
) -> None:
    # The seed example (spec §4): rate 5, burst 500; 7 topics x 80 = 560 partitions all admitted.
    session, _ = build.session_with(
        '[[quotas]]\nclient_id = "app"\ncontroller_mutation_rate = 5\n', top_level="controller_quota_window_num = 100\n"
    )
    names = [f"t{i}" for i in range(7)]
    session.client_data(create_topics_of(1, names, 80), now=0.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1]
    session.broker_data(created(1, names, 80), now=0.1)
    (answer,) = frames(taken(session.to_client))
    assert unpack_from(">i", answer, 9)[0] == 0  # throttle_time_ms, right after the header
    assert session.muted_until == 0.0  # tokens are at -60, but nothing was refused: no mute
    # The first refusal brings the throttle and the mute: ~12 s until the bucket is back at zero.
    session.client_data(create_topics_of(2, ["late"], 1), now=0.2)
    assert not session.to_broker
    (refusal,) = frames(taken(session.to_client))
    response = CreateTopicsResponse.decode(refusal[9:], version=7)
    assert [(t.name, t.error_code) for t in response.topics] == [("late", 89)]
    assert 11_700 <= response.throttle_time_ms <= 12_000
    assert 11.9 <= session.muted_until <= 12.2


class BrokerScript:
    """Answers what the session forwarded, in order; hands its bytes out in chunks of any size."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.received = bytearray()
        self.answered = 0
        self.pending = bytearray()

    def answer_new_requests(self) -> None:
        requests = frames(bytes(self.received))
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
def test_responses_reach_the_client_whole_and_in_order(build: Build, seed: int) -> None:
    rng = random.Random(seed)
    session, engine = build.session_with('[[quotas]]\nclient_id = "app"\ncontroller_mutation_rate = 1\n')
    broker = BrokerScript(rng)
    client_received = bytearray()
    now = 0.0

    def stay_in_debt() -> None:  # every CreateTopics is answered by the session itself
        engine.charge(ANONYMOUS, "app", QuotaKey.CONTROLLER_MUTATION_RATE, 10_000, now)

    def deliver() -> None:
        broker.received += taken(session.to_broker)
        client_received.extend(taken(session.to_client))

    stay_in_debt()
    expected: list[int] = []
    for correlation_id in range(1, 301):
        step = rng.random()
        now += 0.001
        if step < 0.3 and session.muted_until <= now:  # the glue reads nothing while muted
            build = rng.choice([fetch_v4, heartbeat, create_topics])
            expected.append(correlation_id)
            session.client_data(build(correlation_id), now)
        elif step < 0.35:
            now = max(now, session.muted_until)
            session.unmute(now)
            stay_in_debt()
        else:
            broker.answer_new_requests()
            if broker.pending:
                session.broker_data(broker.take(rng.choice([1, 3, 10, 60, 64, 100, 5000, 30_000, 100_000])), now)
        deliver()
    for _ in range(10_000):  # drain: unmute, answer, deliver
        now = max(now, session.muted_until)
        session.unmute(now)
        deliver()
        broker.answer_new_requests()
        if not broker.pending:
            break
        session.broker_data(broker.take(7000), now)
        deliver()

    assert not session.holding and not session.in_flight
    assert correlation_ids(bytes(client_received), 4) == expected


# A client that pipelines A, B, C where the broker would close on C -------------------------------


def heartbeat_answer(correlation_id: int) -> bytes:
    return pack(">ii", 6, correlation_id) + b"\x00\x00"


@pytest.mark.parametrize(
    "offender",
    [
        header_only_request(55, 2, 3, body=b"\x01" * 64),  # DescribeQuorum v2: above the advertised cap
        header_only_request(78, 1, 3),  # ShareFetch: hidden from ApiVersions
        header_only_request(0, 8, 3),  # a Produce the broker cannot parse
        pack(">i", 100 * 1024 * 1024 + 1) + b"\0" * 10,  # over max_frame_size
    ],
    ids=["above-version-cap", "hidden-api", "unparsable", "frame-too-large"],
)
def test_requests_pipelined_before_a_refused_one_are_answered_before_the_close(build: Build, offender: bytes) -> None:
    session, _ = build.session_with()
    session.client_data(heartbeat(1) + heartbeat(2) + offender + heartbeat(4), now=0.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1, 2], "A and B go on; C and what follows never do"
    assert session.refusal is not None and session.refusal_reason == PROTOCOL_ERROR
    assert session.awaiting_answers, "the close waits for A's and B's answers"
    session.client_data(heartbeat(5), now=0.0)
    assert not session.to_broker, "nothing is read after the offender"
    session.broker_data(heartbeat_answer(1) + heartbeat_answer(2), now=0.1)
    assert correlation_ids(taken(session.to_client), 4) == [1, 2]
    assert not session.awaiting_answers, "answered: the connection may close now"


def api_versions_v5(correlation_id: int) -> bytes:
    """ApiVersions v5 as Kafka 4.4's clients send it: header v2 (tags), then the client software name
    and version as compact strings, cluster_id (null), node_id (-1) and the body's tags."""
    body = b"\x00" + b"\x0aquotagate" + b"\x041.0" + b"\x00" + pack(">i", -1) + b"\x00"
    return header_only_request(ApiKey.API_VERSIONS, 5, correlation_id, body)


def test_api_versions_above_what_the_proxy_reads_is_answered_as_the_broker_answers_a_version_it_lacks(
    build: Build,
) -> None:
    # KIP-511: a v0 body, UNSUPPORTED_VERSION, and the range of ApiVersions the answerer reads; the
    # client asks again at a version both know. Nothing goes to the broker, and the answer keeps its turn.
    session, _ = build.session_with()
    session.client_data(heartbeat(1) + api_versions_v5(2) + heartbeat(3), now=0.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1, 3]
    assert session.refusal is None
    session.broker_data(heartbeat_answer(1) + heartbeat_answer(3), now=0.1)
    answers = frames(taken(session.to_client))
    assert [unpack_from(">i", frame, 4)[0] for frame in answers] == [1, 2, 3]
    answer = ApiVersionsResponse.decode(answers[1][8:], version=0)
    assert answer.error_code == 35
    assert [(e.api_key, e.min_version, e.max_version) for e in answer.api_keys] == [
        (ApiKey.API_VERSIONS, 0, ApiVersionsResponse.max_version)
    ]
    assert answers[1] == unsupported_api_versions(2)


def test_a_refusal_behind_a_mute_waits_for_the_requests_held_before_it(build: Build) -> None:
    session, _ = build.session_with('[[quotas]]\nclient_id = "app"\nproducer_byte_rate = 1000\n')
    offender = header_only_request(55, 2, 3, body=b"\x01" * 64)
    session.client_data(produce(1, {"t": b"r" * 20_000}) + heartbeat(2) + offender, now=0.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1]
    assert session.refusal is None, "the offender is read after the heartbeat held before it"
    session.unmute(session.muted_until)
    assert correlation_ids(taken(session.to_broker), 8) == [2]
    assert session.refusal is not None


def test_partial_frames_over_the_shared_budget_refuse_the_client_that_would_go_over_and_only_it(build: Build) -> None:
    budget = ByteBudget(10_000)
    first, second = (build.session(services_for(partial_frames=budget)) for _ in range(2))
    for session in (first, second):
        session.broker_connected(0.0)
        session.client_data(heartbeat(1), now=0.0)  # past the pre-authentication limit
    big = produce(2, {"t": b"r" * 9_000})
    first.client_data(big[:6_000], now=0.0)
    assert budget.used == 6_000 and first.refusal is None
    second.client_data(big[:6_000], now=0.0)
    assert second.refusal is not None and second.refusal_reason == PARTIAL_FRAMES_LIMIT
    assert budget.used == 6_000, "the refused client's bytes are dropped at once"
    assert correlation_ids(taken(second.to_broker), 8) == [1], "what came before the offender still went"
    assert second.services.metrics.frames_refused_total.labels(PARTIAL_FRAMES_LIMIT)._value.get() == 1
    first.client_data(big[6_000:], now=0.0)
    assert correlation_ids(taken(first.to_broker), 8) == [1, 2], "the other client is untouched"
    assert budget.used == 0, "a frame that completed gives its bytes back"
    first.client_data(big[:3_000], now=0.0)
    first.close()
    assert budget.used == 0, "so does a connection that closed"


def test_a_broker_named_for_the_first_time_is_reported_as_seen_before_its_answer_is_written(build: Build) -> None:
    """The rewrite binds nothing: it reports the node ids it sees first in `brokers_seen`, once each,
    for the caller to open their listeners before it writes `to_client` (broker_port_base + N here
    is 40000 + N)."""
    session, _ = build.session_with()
    cluster = {1: ("kafka-1", 9092), 5: ("kafka-5", 9092)}
    session.client_data(metadata_request(1), now=0.0)
    session.broker_data(metadata_answer(1, cluster), now=0.001)
    assert session.brokers_seen == [1, 5]
    assert advertised_brokers(taken(session.to_client)) == {1: ("127.0.0.1", 40001), 5: ("127.0.0.1", 40005)}
    session.brokers_seen.clear()  # what the caller does once the listeners are bound
    other, _ = build.session_with()
    other.services.cluster.advertise(1, "kafka-1", 9092)  # known already to this proxy
    other.services.cluster.take_seen()
    other.client_data(metadata_request(2), now=0.0)
    other.broker_data(metadata_answer(2, cluster | {7: ("kafka-7", 9092)}), now=0.001)
    assert other.brokers_seen == [5, 7], "only the brokers this proxy had not seen yet"
    session.client_data(metadata_request(3), now=0.002)
    session.broker_data(metadata_answer(3, cluster), now=0.003)  # the memo's answer: seen before
    session.client_data(metadata_request(4), now=0.004)
    session.broker_data(metadata_answer(4, {1: ("kafka-1b", 9093)}), now=0.005)  # moved: same proxy port
    assert session.brokers_seen == [], "a broker seen before, or moved, is not reported again"
    assert session.services.cluster.addresses[1] == ("kafka-1b", 9093), "the proxy connects where it is now"
