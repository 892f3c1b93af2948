"""The request path on the versions only Kafka 3.x brokers still take (issue 37 item 2): Produce v0-v2
with magic 0 and 1 message sets (no transactional id, no record batches, no producer IDs), Fetch v0-v3
(v0 has no throttle_time_ms) and old Metadata. Clients of these versions ignore throttle_time_ms
(KIP-219), so the mute is what holds them; these tests pin every walk and patch on them, both builds.
tests/integration/test_old_clients.py runs real old clients against a 3.9 broker."""

from __future__ import annotations

from struct import pack, unpack_from

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.headers import response_body_offset
from quotagate.protocol.produce import (
    NO_PRODUCER_ID,
    produce_producer_id,
    produce_refusal_response,
    produce_request_keeping,
    produce_request_layout,
    produce_response_throttle_offset,
    refused_topic_entry,
)
from quotagate.protocol.produce_walk import produce_acks, produce_topics
from quotagate.protocol.throttle import patch_throttle_time, throttle_time_offset
from tests.support.builds import Build
from tests.support.messages import request_header
from tests.support.session_double import correlation_ids, frames, produce_answer, taken

OLD_PRODUCE = [(0, 0), (1, 0), (2, 1)]  # (version, magic) as clients send them: magic 1 from v2 (0.10)


def message_set(magic: int, values: list[bytes]) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    for offset, value in enumerate(values):
        builder.append(offset, None if magic == 0 else 1_700_000_000_000, b"k", value)
    return bytes(builder.build())


def old_produce(version: int, magic: int, topics: dict[str, list[bytes]], acks: int = 1, correlation_id: int = 3):
    request = ProduceRequest(
        version=version,
        acks=acks,
        timeout_ms=1000,
        topic_data=[(name, [(0, message_set(magic, values))]) for name, values in topics.items()],
    )
    request.with_header(correlation_id=correlation_id, client_id="old")
    return bytes(request.encode(header=True, framed=True))


@pytest.mark.parametrize(("version", "magic"), OLD_PRODUCE)
def test_an_old_produce_is_walked_from_its_acks_without_a_transactional_id(version: int, magic: int) -> None:
    frame = memoryview(old_produce(version, magic, {"orders": [b"a" * 50, b"b"], "clicks": [b"c" * 9]}, acks=-1))
    body = request_header(frame).body_offset
    assert produce_acks(bytes(frame), body, len(frame), version) == -1
    assert produce_topics(bytes(frame), body, len(frame), version, True) == [b"orders", b"clicks"]
    layout = produce_request_layout(frame, body, version)
    assert [topic.name for topic in layout.topics] == ["orders", "clicks"]
    assert all(topic.start < topic.partitions_at < topic.end for topic in layout.topics)
    assert layout.topics_end == len(frame)
    assert layout.topics[0].record_bytes == len(message_set(magic, [b"a" * 50, b"b"]))


@pytest.mark.parametrize(("version", "magic"), OLD_PRODUCE)
def test_a_message_set_has_no_producer_id_as_the_broker_sees_it(version: int, magic: int) -> None:
    frame = memoryview(old_produce(version, magic, {"orders": [b"x" * 80]}))
    assert produce_producer_id(frame, request_header(frame).body_offset, version) == NO_PRODUCER_ID


@pytest.mark.parametrize(("version", "magic"), OLD_PRODUCE)
def test_an_old_produce_keeps_the_topics_it_is_told_to_and_the_broker_can_read_it(version: int, magic: int) -> None:
    frame = memoryview(old_produce(version, magic, {"orders": [b"o"], "clicks": [b"c" * 30]}))
    body = request_header(frame).body_offset
    kept = produce_request_keeping(frame, version, produce_request_layout(frame, body, version), {"clicks"})
    decoded = ProduceRequest.decode(memoryview(kept)[body:], version=version)
    assert [topic.name for topic in decoded.topic_data] == ["clicks"]
    assert decoded.acks == 1 and decoded.timeout_ms == 1000
    assert unpack_from(">i", kept)[0] == len(kept) - 4


@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_proxys_own_refusal_of_an_old_produce_is_in_that_versions_shape(version: int) -> None:
    request = ProduceRequest(
        version=version, acks=1, timeout_ms=1000, topic_data=[("orders", [(0, message_set(1, [b"a"])), (1, b"")])]
    )
    request.with_header(correlation_id=3, client_id="old")
    sent = memoryview(bytes(request.encode(header=True, framed=True)))
    (topic,) = produce_request_layout(sent, request_header(sent).body_offset, version).topics
    frame = produce_refusal_response(3, version, [refused_topic_entry(sent, version, topic, 89, "over its threshold")])
    decoded = ProduceResponse.decode(memoryview(frame)[8:], version=version)
    assert [(p.index, p.error_code) for t in decoded.responses for p in t.partition_responses] == [(0, 89), (1, 89)]


@pytest.mark.parametrize("version", [1, 2])
def test_old_produce_responses_carry_the_throttle_behind_their_partitions(version: int) -> None:
    frame = memoryview(produce_answer(3, ["orders", "clicks"], version, throttle=5))
    offset = produce_response_throttle_offset(frame, response_body_offset(frame, ApiKey.PRODUCE, version), version)
    assert offset == len(frame) - 4 and unpack_from(">i", frame, offset)[0] == 5
    patched, upstream = patch_throttle_time(frame, ApiKey.PRODUCE, version, 900)
    assert upstream == 5 and unpack_from(">i", patched, len(patched) - 4)[0] == 900


def test_a_v0_produce_response_has_no_throttle_time_and_goes_on_untouched() -> None:
    frame = memoryview(produce_answer(3, ["orders"], 0))
    assert throttle_time_offset(frame, ApiKey.PRODUCE, 0) is None
    assert patch_throttle_time(frame, ApiKey.PRODUCE, 0, 900)[0] is frame


def old_fetch(version: int, max_wait_ms: int = 500, correlation_id: int = 4) -> bytes:
    partition = FetchRequest.FetchTopic.FetchPartition(
        version=version, partition=0, fetch_offset=0, partition_max_bytes=1 << 20
    )
    request = FetchRequest(
        version=version,
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[FetchRequest.FetchTopic(version=version, topic="orders", partitions=[partition])],
    )
    request.with_header(correlation_id=correlation_id, client_id="old")
    return bytes(request.encode(header=True, framed=True))


def old_fetch_answer(version: int, records: bytes, correlation_id: int = 4, throttle: int = 0) -> bytes:
    partition = FetchResponse.FetchableTopicResponse.PartitionData
    response = FetchResponse(
        version=version,
        throttle_time_ms=throttle,
        responses=[
            FetchResponse.FetchableTopicResponse(
                version=version,
                topic="orders",
                partitions=[
                    partition(version=version, partition_index=0, error_code=0, high_watermark=9, records=records)
                ],
            )
        ],
    )
    payload = pack(">i", correlation_id) + bytes(response.encode())
    return pack(">i", len(payload)) + payload


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_an_old_fetch_says_how_long_it_may_wait(build: Build, version: int) -> None:
    session, _ = build.session_with()
    session.client_data(old_fetch(version, max_wait_ms=750), 0.0)
    assert session.in_flight[-1].fetch_max_wait_ms == 750


@pytest.mark.parametrize("version", [1, 2, 3])
def test_old_fetch_responses_from_v1_carry_the_throttle_first(version: int) -> None:
    frame = memoryview(old_fetch_answer(version, message_set(1, [b"r"]), throttle=3))
    assert throttle_time_offset(frame, ApiKey.FETCH, version) == 8
    assert unpack_from(">i", patch_throttle_time(frame, ApiKey.FETCH, version, 700)[0], 8)[0] == 700


def test_a_v0_fetch_response_has_no_throttle_time_and_goes_on_untouched() -> None:
    frame = memoryview(old_fetch_answer(0, message_set(0, [b"r"])))
    assert throttle_time_offset(frame, ApiKey.FETCH, 0) is None
    assert patch_throttle_time(frame, ApiKey.FETCH, 0, 700)[0] is frame


QUOTAS = '[[quotas]]\nclient_id = "old"\nproducer_byte_rate = 1000\nconsumer_byte_rate = 1000\n'


@pytest.mark.parametrize(("version", "magic"), OLD_PRODUCE)
def test_an_old_producer_in_debt_is_held_by_the_mute_whatever_its_response_says(
    build: Build, version: int, magic: int
) -> None:
    # Burst: 1000 B/s × 11 windows; a 20 kB produce leaves ~9 s of debt. A v0 response cannot say so
    # (no throttle_time_ms) and a v1-v2 client ignores it: the proxy stops reading the connection.
    session, _ = build.session_with(QUOTAS)
    request = old_produce(version, magic, {"orders": [b"r" * 20_000]}, correlation_id=1)
    session.client_data(request + old_produce(version, magic, {"orders": [b"s"]}, correlation_id=2), now=10.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1], "the second waits for the mute"
    assert 18.5 < session.muted_until < 19.5, session.muted_until
    session.broker_data(produce_answer(1, ["orders"], version), now=10.1)
    (answer,) = frames(taken(session.to_client))
    if version == 0:
        assert answer == produce_answer(1, ["orders"], 0), "no field to patch: as the broker sent it"
    else:
        assert 8000 < unpack_from(">i", answer, len(answer) - 4)[0] < 9500
    session.unmute(session.muted_until)
    assert correlation_ids(taken(session.to_broker), 8) == [2]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_an_old_consumer_is_charged_its_fetch_and_held_by_the_mute(build: Build, version: int) -> None:
    session, _ = build.session_with(QUOTAS)
    session.client_data(old_fetch(version, correlation_id=1), now=10.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1]
    records = message_set(0 if version < 2 else 1, [b"v" * 20_000])
    session.broker_data(old_fetch_answer(version, records, correlation_id=1), now=10.2)
    (answer,) = frames(taken(session.to_client))
    assert 18.5 < session.muted_until < 19.5, "20 kB over an 11 kB burst at 1000 B/s"
    if version == 0:
        assert answer == old_fetch_answer(0, records, correlation_id=1)
    else:
        assert 8000 < unpack_from(">i", answer, 8)[0] < 9500
    session.client_data(old_fetch(version, correlation_id=2), now=11.0)
    assert not session.to_broker and session.holding, "read, and held until the mute ends"
