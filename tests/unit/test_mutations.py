"""Topic mutations cut to the admitted topics, refusals answered and merged in the client's order."""

import pytest
from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.headers import response_body_offset
from quotagate.protocol.mutations import (
    QUOTA_EXCEEDED_MESSAGE,
    THROTTLING_QUOTA_EXCEEDED,
    decode_mutation,
    decode_results,
    merge_refusals,
    refusal_response,
)
from tests.support.messages import request_header
from tests.support.mutation_messages import (
    CASES,
    NAMES,
    create_partitions,
    create_topics,
    delete_topics,
    framed,
    response_frame,
    result_entries,
)


@pytest.mark.parametrize(("api_key", "version", "build"), CASES)
def test_a_mutation_keeps_only_the_admitted_topics_in_order(api_key, version, build) -> None:
    frame = framed(build(version))
    header = request_header(frame)
    request = decode_mutation(frame, header.body_offset, api_key, version)
    assert [t.name for t in request.topics] == NAMES
    kept = memoryview(request.encode_keeping([0, 2]))
    kept_header = request_header(kept)
    assert (kept_header.api_key, kept_header.correlation_id, kept_header.client_id) == (api_key, 4, "admin")
    again = decode_mutation(kept, kept_header.body_offset, api_key, version)
    assert [t.name for t in again.topics] == ["t0", "t2"]
    assert [t.name for t in request.topics] == NAMES  # the decoded original is left intact


def test_create_topics_asks_for_its_partition_counts_and_minus_one_for_the_broker_default() -> None:
    message = create_topics(7)
    message.topics[1].num_partitions = -1
    frame = framed(message)
    request = decode_mutation(frame, request_header(frame).body_offset, ApiKey.CREATE_TOPICS, 7)
    assert [t.requested for t in request.topics] == [10, -1, 30]
    assert request.strict and not request.validate_only


@pytest.mark.parametrize(("api_key", "version", "build"), CASES)
def test_refusals_are_merged_into_the_broker_response_in_request_order(api_key, version, build) -> None:
    frame = framed(build(version))
    request = decode_mutation(frame, request_header(frame).body_offset, api_key, version)
    upstream = response_frame(api_key, version, result_entries(api_key, version, ["t0", "t2"]))
    response, results = decode_results(upstream, api_key, version)
    assert [(r.name, r.error_code) for r in results] == [("t0", 0), ("t2", 0)]
    merged = merge_refusals(upstream, request, [0, 2], [1], response)
    _, merged_results = decode_results(merged, api_key, version)
    assert [(r.name, r.error_code) for r in merged_results] == [
        ("t0", 0),
        ("t1", THROTTLING_QUOTA_EXCEEDED),
        ("t2", 0),
    ]


@pytest.mark.parametrize(
    ("api_key", "version", "build"),
    [
        (ApiKey.CREATE_TOPICS, 7, create_topics),
        (ApiKey.DELETE_TOPICS, 6, delete_topics),
        (ApiKey.DELETE_TOPICS, 5, delete_topics),
        (ApiKey.CREATE_PARTITIONS, 3, create_partitions),
    ],
)
def test_a_request_with_nothing_admitted_is_answered_by_the_proxy(api_key, version, build) -> None:
    frame = framed(build(version))
    request = decode_mutation(frame, request_header(frame).body_offset, api_key, version)
    answer = memoryview(refusal_response(request, 4, [0, 1, 2], throttle_ms=5000))
    body = answer[response_body_offset(answer, api_key, version) :]
    decoded = request_response_class(api_key).decode(body, version=version)
    assert decoded.throttle_time_ms == 5000
    entries = (
        decoded.topics
        if api_key == ApiKey.CREATE_TOPICS
        else (decoded.responses if api_key == ApiKey.DELETE_TOPICS else decoded.results)
    )
    assert [(e.name, e.error_code, e.error_message) for e in entries] == [
        (n, THROTTLING_QUOTA_EXCEEDED, QUOTA_EXCEEDED_MESSAGE) for n in NAMES
    ]


def test_a_proxy_made_refusal_caps_its_throttle_at_the_int32_maximum() -> None:
    # A client deep in debt (10^9 partitions at 1/s) must get an answer, not break the encoder.
    frame = framed(create_topics(7))
    request = decode_mutation(frame, request_header(frame).body_offset, ApiKey.CREATE_TOPICS, 7)
    answer = memoryview(refusal_response(request, 4, [0], throttle_ms=10**12))
    body = answer[response_body_offset(answer, ApiKey.CREATE_TOPICS, 7) :]
    assert CreateTopicsResponse.decode(body, version=7).throttle_time_ms == 2**31 - 1


def request_response_class(api_key: int) -> type:
    return {
        ApiKey.CREATE_TOPICS: CreateTopicsResponse,
        ApiKey.DELETE_TOPICS: DeleteTopicsResponse,
        ApiKey.CREATE_PARTITIONS: CreatePartitionsResponse,
    }[api_key]
