"""Produce requests split by topic without decoding records; refusals answered per partition."""

from struct import pack

import pytest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from quotagate.protocol.produce import (
    produce_refusal_response,
    produce_request_keeping,
    produce_request_layout,
    produce_response_with_refusals,
    refused_topic_entry,
)
from tests.support.messages import request_header

RECORDS = {"orders": b"\x01" * 70, "clicks": b"\x02" * 30, "views": b"\x03" * 5}


def request_frame(version: int) -> memoryview:
    request = ProduceRequest(
        version=version,
        transactional_id="tx" if version % 2 else None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[(name, [(0, records), (1, records)]) for name, records in RECORDS.items()],
    )
    request.with_header(correlation_id=9, client_id="c")
    return memoryview(bytes(request.encode(header=True, framed=True)))


@pytest.mark.parametrize("version", range(3, 13))
def test_layout_names_each_topic_with_its_partitions_and_record_bytes(version: int) -> None:
    frame = request_frame(version)
    layout = produce_request_layout(frame, request_header(frame).body_offset, version)
    assert [(t.name, t.record_bytes) for t in layout.topics] == [
        (name, 2 * len(records)) for name, records in RECORDS.items()
    ]
    assert all(t.start < t.partitions_at < t.end for t in layout.topics)


@pytest.mark.parametrize("version", range(3, 13))
def test_a_request_rebuilt_without_a_topic_decodes_to_the_rest_unchanged(version: int) -> None:
    frame = request_frame(version)
    header = request_header(frame)
    layout = produce_request_layout(frame, header.body_offset, version)
    rebuilt = memoryview(produce_request_keeping(frame, version, layout, {"orders", "views"}))
    rebuilt_header = request_header(rebuilt)
    assert rebuilt_header == header._replace(body_offset=rebuilt_header.body_offset)
    decoded = ProduceRequest.decode(rebuilt[rebuilt_header.body_offset :], version=version)
    original = ProduceRequest.decode(frame[header.body_offset :], version=version)
    assert [t.name for t in decoded.topic_data] == ["orders", "views"]
    assert decoded.topic_data == [t for t in original.topic_data if t.name != "clicks"]
    assert (decoded.acks, decoded.timeout_ms, decoded.transactional_id) == (-1, 1000, original.transactional_id)


def response_frame(version: int, names: list[str]) -> bytes:
    topic = ProduceResponse.TopicProduceResponse
    partition = topic.PartitionProduceResponse
    response = ProduceResponse(
        version=version,
        responses=[
            topic(version=version, name=n, partition_responses=[partition(version=version, index=0, base_offset=5)])
            for n in names
        ],
        throttle_time_ms=0,
    )
    header = pack(">i", 9) + (b"\x00" if version >= 9 else b"")
    body = bytes(response.encode())
    return pack(">i", len(header) + len(body)) + header + body


def refused_entry(version: int, name: str, message: str = "over threshold") -> bytes:
    frame = request_frame(version)
    layout = produce_request_layout(frame, request_header(frame).body_offset, version)
    topic = next(t for t in layout.topics if t.name == name)
    return refused_topic_entry(frame, version, topic, 89, message)


@pytest.mark.parametrize("version", range(3, 13))
def test_refused_topics_are_merged_into_the_broker_answer_in_request_order(version: int) -> None:
    merged = produce_response_with_refusals(
        response_frame(version, ["orders", "views"]),
        version,
        ("orders", "clicks", "views"),
        {"clicks": refused_entry(version, "clicks")},
    )
    body_offset = 8 + (1 if version >= 9 else 0)
    decoded = ProduceResponse.decode(memoryview(merged)[body_offset:], version=version)
    assert [t.name for t in decoded.responses] == ["orders", "clicks", "views"]
    clicks = decoded.responses[1].partition_responses
    assert [(p.index, p.error_code, p.base_offset, p.log_start_offset) for p in clicks] == [
        (0, 89, -1, -1),
        (1, 89, -1, -1),
    ]
    if version >= 8:
        assert [(p.error_message, p.record_errors) for p in clicks] == [("over threshold", [])] * 2
    assert decoded.responses[0].partition_responses[0].base_offset == 5


@pytest.mark.parametrize("version", range(3, 13))
def test_a_refused_topic_is_answered_as_kafka_python_encodes_the_same_refusal(version: int) -> None:
    """The entry is made from the request's bytes (name, partition indexes) and fields encoded once:
    byte for byte what kafka-python makes of the same refusal."""
    partition = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    extra = {"record_errors": [], "error_message": "no"} if version >= 8 else {}
    expected = ProduceResponse(
        version=version,
        responses=[
            ProduceResponse.TopicProduceResponse(
                version=version,
                name="clicks",
                partition_responses=[
                    partition(version=version, index=p, error_code=89, base_offset=-1, log_start_offset=-1, **extra)
                    for p in (0, 1)
                ],
            )
        ],
        throttle_time_ms=0,
    )
    made = produce_refusal_response(9, version, [refused_entry(version, "clicks", "no")])
    assert made[8 + (1 if version >= 9 else 0) :] == bytes(expected.encode())


def test_a_fully_refused_request_gets_a_response_made_by_the_proxy() -> None:
    frame = produce_refusal_response(9, 9, [refused_entry(9, "orders", "no")])
    decoded = ProduceResponse.decode(memoryview(frame)[9:], version=9)
    assert [(p.index, p.error_code) for p in decoded.responses[0].partition_responses] == [(0, 89), (1, 89)]
