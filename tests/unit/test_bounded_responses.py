"""The responses the proxy changes cost C per byte, whatever their size: a client sizes them (a batched
FindCoordinator of 20 000 keys, DescribeConfigs of 5 000 resources, a produce of 100 000 partitions, a
share session's partitions), and the proxy's one loop must not run Python per entry for it (issue 34:
nothing a client sends may cost the loop more than a small, fixed budget).

Measured by counting Python calls, not time (tests/support/python_calls.py); the results are
checked against kafka-python's decoding of them.
"""

from __future__ import annotations

from struct import unpack_from

import pytest
from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeClientQuotasResponse,
    DescribeConfigsResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.client_quotas import DescribeResult, describe_response
from quotagate.protocol.framing import FrameError
from quotagate.protocol.headers import response_body_offset
from quotagate.protocol.mutations import decode_mutation, decode_results, refusal_response
from quotagate.protocol.produce import (
    produce_refusal_response,
    produce_request_layout,
    produce_response_has_top_level_tags,
    produce_response_throttle_offset,
    produce_response_with_refusals,
    refused_topic_entry,
)
from quotagate.protocol.rewrite import RESPONSE_REWRITERS
from quotagate.protocol.throttle import patch_throttle_time
from tests.support.fuzz import reframed
from tests.support.messages import produce_response, request_header, share_response_body
from tests.support.mutation_messages import framed
from tests.support.mutation_messages import response_frame as mutation_response_frame
from tests.support.python_calls import assert_bounded, compiled_only
from tests.support.rewrite_messages import PROXY_HOST, Recorder, response_frame
from tests.support.share_messages import response_frame as share_frame


def coordinators(count: int, version: int) -> memoryview:
    """A batched FindCoordinator response: coordinators on three brokers, every fifth key unknown."""
    entry = FindCoordinatorResponse.Coordinator
    entries = [
        entry(version=version, key=f"group-{i}", node_id=-1, host="", port=-1, error_code=15, error_message="no")
        if i % 5 == 4
        else entry(version=version, key=f"group-{i}", node_id=1 + i % 3, host=f"kafka-{1 + i % 3}", port=9092 + i % 3)
        for i in range(count)
    ]
    message = FindCoordinatorResponse(version=version, throttle_time_ms=0, coordinators=entries)
    return response_frame(ApiKey.FIND_COORDINATOR, version, message)


@compiled_only
@pytest.mark.parametrize("version", [4, 5, 6])
def test_a_batched_find_coordinator_is_rewritten_in_c_whatever_the_number_of_keys(version: int) -> None:
    def rewrite(count: int):
        frame = coordinators(count, version)
        return lambda: RESPONSE_REWRITERS[ApiKey.FIND_COORDINATOR](frame, version, Recorder())

    assert_bounded(rewrite, 10, 400, "FindCoordinator")


@pytest.mark.parametrize("version", [4, 5, 6])
def test_a_batched_find_coordinator_keeps_every_byte_but_the_found_coordinators_addresses(version: int) -> None:
    frame = coordinators(400, version)
    recorder = Recorder()
    out = RESPONSE_REWRITERS[ApiKey.FIND_COORDINATOR](frame, version, recorder)
    assert out is not None and unpack_from(">i", out, 0)[0] == len(out) - 4
    body = response_body_offset(memoryview(out), ApiKey.FIND_COORDINATOR, version)
    answered = FindCoordinatorResponse.decode(memoryview(out)[body:], version=version).coordinators
    before = FindCoordinatorResponse.decode(frame[body:], version=version).coordinators
    assert len(answered) == len(before) == 400
    for old, new in zip(before, answered, strict=True):
        if old.error_code:
            assert (new.key, new.node_id, new.host, new.port, new.error_code, new.error_message) == (
                old.key, -1, "", -1, 15, "no",
            )  # fmt: skip
        else:
            assert (new.key, new.node_id, new.host, new.port) == (old.key, old.node_id, PROXY_HOST, 20000 + old.node_id)
    assert recorder.seen == {1: ("kafka-1", 9092), 2: ("kafka-2", 9093), 3: ("kafka-3", 9094)}


def describe_configs(resources: int, version: int) -> memoryview:
    """DescribeConfigs answering `resources` brokers (every config naming an address among others)."""
    result_cls = DescribeConfigsResponse.DescribeConfigsResult
    config_cls = result_cls.DescribeConfigsResourceResult
    synonym_cls = config_cls.DescribeConfigsSynonym
    configs = [
        ("listeners", "PLAINTEXT://:9092"),
        ("log.dirs", "/var/lib/kafka"),
        ("some.endpoint", "kafka-1.internal:8443"),
        ("num.io.threads", "8"),
    ]

    def config(name: str, value: str):
        extra = (
            {"config_source": 4, "synonyms": [synonym_cls(version=version, name=name, value=value, source=4)]}
            if version >= 1
            else {"is_default": False}
        )
        return config_cls(version=version, name=name, value=value, read_only=True, is_sensitive=False, **extra)

    results = [
        result_cls(
            version=version,
            error_code=0,
            error_message=None,
            resource_type=4,
            resource_name=str(i),
            configs=[config(name, value) for name, value in configs],
        )
        for i in range(resources)
    ]
    message = DescribeConfigsResponse(version=version, throttle_time_ms=0, results=results)
    return response_frame(ApiKey.DESCRIBE_CONFIGS, version, message)


@compiled_only
@pytest.mark.parametrize("version", [0, 1, 3, 4])
def test_describe_configs_is_walked_in_c_whatever_the_number_of_resources(version: int) -> None:
    def rewrite(count: int):
        frame = describe_configs(count, version)
        return lambda: RESPONSE_REWRITERS[ApiKey.DESCRIBE_CONFIGS](frame, version, Recorder())

    assert_bounded(rewrite, 3, 100, "DescribeConfigs")


@pytest.mark.parametrize("version", [0, 1, 3, 4])
def test_describe_configs_hides_each_address_of_every_resource_and_keeps_the_rest(version: int) -> None:
    frame = describe_configs(60, version)
    out = RESPONSE_REWRITERS[ApiKey.DESCRIBE_CONFIGS](frame, version, Recorder())
    assert out is not None and unpack_from(">i", out, 0)[0] == len(out) - 4
    body = response_body_offset(memoryview(out), ApiKey.DESCRIBE_CONFIGS, version)
    results = DescribeConfigsResponse.decode(memoryview(out)[body:], version=version).results
    assert [r.resource_name for r in results] == [str(i) for i in range(60)]
    for result in results:
        seen = {c.name: (c.value, c.is_sensitive) for c in result.configs}
        assert seen == {
            "listeners": (None, True),
            "log.dirs": ("/var/lib/kafka", False),
            "some.endpoint": (None, True),
            "num.io.threads": ("8", False),
        }
        if version >= 1:
            assert [s.value for c in result.configs for s in c.synonyms] == [None, "/var/lib/kafka", None, "8"]


def produce_frame(partitions: int, version: int, endpoints: bool = False) -> memoryview:
    message = produce_response(version, throttle=7, endpoints=endpoints, topics=2, partitions=partitions)
    return response_frame(ApiKey.PRODUCE, version, message)


@compiled_only
@pytest.mark.parametrize("version", range(3, 13))
def test_a_produce_responses_throttle_and_tags_are_found_in_c_whatever_the_number_of_partitions(version: int) -> None:
    """Behind every partition's result: its throttle_time_ms (patched when the client is throttled) and
    its top-level tagged fields (KIP-951 NodeEndpoints, rewritten)."""

    def walks(count: int):
        frame = produce_frame(count, version, endpoints=version >= 10)
        body = response_body_offset(frame, ApiKey.PRODUCE, version)

        def walk() -> None:
            produce_response_throttle_offset(frame, body, version)
            produce_response_has_top_level_tags(frame, body, version)
            patch_throttle_time(frame, ApiKey.PRODUCE, version, 1_000)
            RESPONSE_REWRITERS[ApiKey.PRODUCE](frame, version, Recorder())

        return walk

    assert_bounded(walks, 3, 100, f"Produce v{version}")


@pytest.mark.parametrize("version", range(10, 13))
def test_a_produce_responses_node_endpoints_are_rewritten_where_they_stand(version: int) -> None:
    frame = produce_frame(50, version, endpoints=True)
    out = RESPONSE_REWRITERS[ApiKey.PRODUCE](frame, version, Recorder())
    assert out is not None and unpack_from(">i", out, 0)[0] == len(out) - 4
    body = response_body_offset(memoryview(out), ApiKey.PRODUCE, version)
    new = ProduceResponse.decode(memoryview(out)[body:], version=version)
    old = ProduceResponse.decode(frame[body:], version=version)
    assert [(n.node_id, n.host, n.port, n.rack) for n in new.node_endpoints] == [(2, PROXY_HOST, 20002, "r")]
    assert new.responses == old.responses and new.throttle_time_ms == old.throttle_time_ms == 7
    assert bytes(out[body : body + 100]) == bytes(frame[body : body + 100])


@compiled_only
@pytest.mark.parametrize(("api_key", "version"), [(78, 1), (78, 2), (79, 1), (79, 2)])
def test_a_share_response_is_walked_in_c_whatever_the_number_of_partitions(api_key: int, version: int) -> None:
    def rewrite(count: int):
        partitions = [(i, 6 if i % 2 else 0, None, b"\x01" * 20 if i % 3 == 0 else b"") for i in range(count)]
        frame = share_frame(api_key, share_response_body(api_key, version, partitions, [(2, "kafka-2", 9092, None)]))
        return lambda: RESPONSE_REWRITERS[api_key](frame, version, Recorder())

    assert_bounded(rewrite, 3, 300, f"share response {api_key} v{version}")


def test_a_produce_response_whose_tags_do_not_end_the_frame_is_refused() -> None:
    frame = produce_frame(3, 12, endpoints=True)
    for bad in (bytes(frame[4:]) + b"\x00", bytes(frame[4:-1])):
        with pytest.raises(FrameError):
            RESPONSE_REWRITERS[ApiKey.PRODUCE](reframed(bad), 12, Recorder())


# Topic mutations (KIP-599): each topic is decoded into one small tuple, within max_decoded_elements;
# nothing else about it runs Python, and a created topic's configs in the response are only walked.
def create_topics_frame(count: int, version: int) -> memoryview:
    topic = CreateTopicsRequest.CreatableTopic
    message = CreateTopicsRequest(
        version=version,
        topics=[
            topic(
                version=version,
                name=f"topic-{i}",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[topic.CreatableReplicaAssignment(version=version, partition_index=0, broker_ids=[1, 2])],
                configs=[topic.CreatableTopicConfig(version=version, name="retention.ms", value="1000")] * 3,
            )
            for i in range(count)
        ],
        timeout_ms=1000,
        validate_only=False,
    )
    return framed(message)


@compiled_only
@pytest.mark.parametrize("version", [2, 5, 7])
def test_a_topic_mutation_is_read_in_c_and_cut_and_refused_by_copying_bytes(version: int) -> None:
    def mutation(count: int):
        frame = create_topics_frame(count, version)
        body = request_header(frame).body_offset

        def handle() -> None:
            request = decode_mutation(frame, body, ApiKey.CREATE_TOPICS, version)
            request.encode_keeping(list(range(0, count, 2)))
            refusal_response(request, 4, list(range(count)), 100)

        return handle

    assert_bounded(mutation, 3, 200, f"CreateTopics v{version}", per_entry=2)


@compiled_only
@pytest.mark.parametrize("version", [5, 7])
def test_a_create_topics_response_with_every_topics_configs_is_walked_not_decoded(version: int) -> None:
    result = CreateTopicsResponse.CreatableTopicResult
    config = result.CreatableTopicConfigs

    def results(count: int):
        entries = [
            result(
                version=version,
                name=f"topic-{i}",
                error_code=0,
                num_partitions=3,
                replication_factor=1,
                configs=[
                    config(version=version, name=f"c{j}", value="v", read_only=False, config_source=5)
                    for j in range(30)
                ],
            )
            for i in range(count)
        ]
        frame = mutation_response_frame(
            ApiKey.CREATE_TOPICS, version, CreateTopicsResponse(version=version, throttle_time_ms=0, topics=entries)
        )
        return lambda: decode_results(frame, ApiKey.CREATE_TOPICS, version)

    assert_bounded(results, 3, 100, f"CreateTopics response v{version}", per_entry=1)


# Produce refusals (per-topic thresholds, producer_ids_rate): a refused topic is answered from its
# partitions' bytes, and the broker's answer for the rest is merged by copying its entries.
def many_partitions_request(partitions: int, version: int) -> memoryview:
    request = ProduceRequest(
        version=version,
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[("kept", [(0, b"\x01" * 10)]), ("refused", [(p, b"") for p in range(partitions)])],
    )
    request.with_header(correlation_id=1, client_id="c")
    return memoryview(bytes(request.encode(header=True, framed=True)))


@compiled_only
@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_a_refused_topic_is_answered_and_merged_in_c_whatever_the_number_of_its_partitions(version: int) -> None:
    def refuse(count: int):
        frame = many_partitions_request(count, version)
        layout = produce_request_layout(frame, request_header(frame).body_offset, version)
        answer = bytes(
            response_frame(ApiKey.PRODUCE, version, produce_response(version, 0, topics=1, partitions=count))
        )

        def handle() -> None:
            entry = refused_topic_entry(frame, version, layout.topics[1], 89, "over its threshold")
            produce_response_with_refusals(answer, version, ("topic-0", "refused"), {"refused": entry})
            produce_refusal_response(1, version, [entry])

        return handle

    assert_bounded(refuse, 3, 300, f"Produce v{version} refusal")


# The proxy's own DescribeClientQuotas answer: as many entries as its quotas match.
def described(count: int) -> DescribeResult:
    entries = tuple(
        (
            (("user", f"tenant-{i}"), ("client-id", None if i % 3 else f"app-{i}")),
            {"producer_byte_rate": 1000.0 * i, "request_percentage": 12.5},
        )
        for i in range(count)
    )
    return DescribeResult(0, None, entries)


@pytest.mark.parametrize("version", [0, 1])
def test_the_proxys_describe_answer_is_what_kafka_python_encodes(version: int) -> None:
    result = described(50)
    cls = DescribeClientQuotasResponse
    expected = cls(
        version=version,
        throttle_time_ms=7,
        error_code=0,
        error_message=None,
        entries=[
            cls.EntryData(
                version=version,
                entity=[cls.EntryData.EntityData(version=version, entity_type=t, entity_name=n) for t, n in entity],
                values=[cls.EntryData.ValueData(version=version, key=k, value=v) for k, v in values.items()],
            )
            for entity, values in result.entries
        ],
    )
    frame = describe_response(5, version, result, 7)
    assert unpack_from(">i", frame, 0)[0] == len(frame) - 4
    assert frame[8 + version :] == bytes(expected.encode()), "the answer's body, byte for byte"
    refused = describe_response(5, version, DescribeResult(31, "Cluster authorization failed.", ()))
    assert DescribeClientQuotasResponse.decode(memoryview(refused)[8 + version :], version=version).entries is None


@compiled_only
@pytest.mark.parametrize("version", [0, 1])
def test_the_proxys_describe_answer_runs_no_python_an_entry(version: int) -> None:
    def answer(count: int):
        result = described(count)
        return lambda: describe_response(5, version, result)

    assert_bounded(answer, 3, 300, f"DescribeClientQuotas v{version} answer")
