"""Kafka's limits on what a request may make the proxy read (issue 34), and the walk that checks
them (protocol/wire_walk.py) against kafka-python's encodings: every string and array as Kafka's
readers check them, the answers made from a request's bytes without decoding it, a describe filter
decoded no further than its answer needs, a Metadata response's topics walked and never decoded.
"""

from __future__ import annotations

import random

import pytest
from kafka.protocol.admin import AlterClientQuotasRequest, AlterClientQuotasResponse, CreateTopicsRequest
from kafka.protocol.metadata import MetadataResponse

from quotagate import compiled
from quotagate.protocol.apis import ApiKey
from quotagate.protocol.client_quotas import alter_refusal, decode_describe
from quotagate.protocol.framing import FrameError
from quotagate.protocol.headers import response_body_offset
from quotagate.protocol.limits import MAX_ARRAY_ELEMENTS
from quotagate.protocol.produce import produce_producer_id
from quotagate.protocol.rewrite import rewrite_metadata
from quotagate.proxy.metrics import DECODED_ELEMENTS_LIMIT
from quotagate.proxy.quota_admin import DESCRIBE_COMPONENTS_DECODED
from quotagate.quotas.admin import describe
from tests.support import attack_frames
from tests.support.messages import alteration_request, create_topics_request, describe_request, request_header
from tests.support.rewrite_messages import Recorder, response_frame
from tests.support.session_double import produce, services_for

wire = compiled.load("quotagate.protocol.wire_walk")


def body_of(frame: bytes) -> int:
    return request_header(memoryview(frame)).body_offset


# the walk -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 1])
def test_the_walk_ends_where_the_request_ends_and_counts_its_elements(version: int) -> None:
    frame = alteration_request(["alice", None, "bob"], version)
    walk = wire.Walk(wire.program(AlterClientQuotasRequest, version), frame)
    assert walk.message(body_of(frame)) == len(frame)
    assert walk.elements == 3 + 4 + 3  # entries, their entity parts, their ops


@pytest.mark.parametrize("version", range(2, 8))
def test_every_create_topics_version_walks_to_its_end(version: int) -> None:
    frame = create_topics_request(4, version)
    assert wire.check(CreateTopicsRequest, version, frame, body_of(frame)) == 4


def test_a_string_over_32767_bytes_is_refused_naming_its_field() -> None:
    frame = alteration_request(["n" * 32_768])
    with pytest.raises(FrameError, match=r"Entries\.Entity\.EntityName had invalid length 32768"):
        wire.check(AlterClientQuotasRequest, 1, frame, body_of(frame))
    fine = alteration_request(["n" * 32_767])
    assert wire.check(AlterClientQuotasRequest, 1, fine, body_of(fine)) == 3


def test_an_array_longer_than_kafka_allows_or_than_the_bytes_left_is_refused() -> None:
    frame = alteration_request(["alice"])
    body = body_of(frame)
    too_many = frame[:body] + attack_frames.uvarint(MAX_ARRAY_ELEMENTS + 2) + frame[body + 1 :]
    with pytest.raises(FrameError, match="array field Entries has 1000001 elements"):
        wire.check(AlterClientQuotasRequest, 1, too_many, body)
    more_than_bytes = frame[:body] + attack_frames.uvarint(1000) + frame[body + 1 :]
    with pytest.raises(FrameError, match="tried to allocate a collection of size 999"):
        wire.check(AlterClientQuotasRequest, 1, more_than_bytes, body)


def test_a_null_where_the_schema_allows_none_is_refused() -> None:
    frame = alteration_request(["alice"])
    body = body_of(frame)
    with pytest.raises(FrameError, match="non-nullable field Entries was serialized as null"):
        wire.check(AlterClientQuotasRequest, 1, frame[:body] + b"\x00" + frame[body + 1 :], body)


def test_a_truncated_request_raises_frame_error_and_nothing_else() -> None:
    frame = alteration_request(["alice", None, "bob"])
    body = body_of(frame)
    for end in range(body, len(frame)):
        with pytest.raises(FrameError):
            wire.check(AlterClientQuotasRequest, 1, frame[:end], body)


def test_past_max_decoded_elements_the_walk_stops_naming_the_key() -> None:
    frame = create_topics_request(20)
    with pytest.raises(wire.ElementsOverLimit, match=r"over proxy\.max_decoded_elements") as info:
        wire.check(CreateTopicsRequest, 6, frame, body_of(frame), 10, "proxy.max_decoded_elements")
    assert info.value.reason == DECODED_ELEMENTS_LIMIT


# answers made from the request's bytes --------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 1])
def test_an_alter_refused_whole_answers_every_entry_with_its_entity_as_sent(version: int) -> None:
    names = ["alice", None, "bob", "é"]
    frame = alteration_request(names, version)
    header = request_header(memoryview(frame))
    response = alter_refusal(frame, header, 31, "Cluster authorization failed.")
    view = memoryview(response)
    assert int.from_bytes(view[4:8], "big") == 7
    decoded = AlterClientQuotasResponse.decode(
        view[response_body_offset(view, ApiKey.ALTER_CLIENT_QUOTAS, version) :], version=version
    )
    assert [(e.error_code, e.error_message) for e in decoded.entries] == [(31, "Cluster authorization failed.")] * 4
    entities = [[(part.entity_type, part.entity_name) for part in e.entity] for e in decoded.entries]
    assert entities == [[("user", name)] + ([("client-id", "c")] if i % 2 else []) for i, name in enumerate(names)]


def test_an_alter_refused_whole_is_never_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decoding(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("decoded")

    monkeypatch.setattr(AlterClientQuotasRequest, "decode", no_decoding)
    frame = attack_frames.alter_client_quotas(20_000)
    header = request_header(memoryview(frame))
    response = alter_refusal(frame, header, 31, "Cluster authorization failed.")
    assert len(response) > 20_000 * 40


def test_a_filter_of_many_components_is_answered_as_its_whole_decode_would_be() -> None:
    """A filter names each entity type once: its first DESCRIBE_COMPONENTS_DECODED components hold
    its first problem, which is the whole answer."""
    services = services_for('[[quotas]]\nuser = "alice"\nproducer_byte_rate = 1000\n')
    quotas = services.engine.table
    types = ["user", "client-id", "ip", "client-id-prefix", "", "topic"]
    generator = random.Random(34)
    for _ in range(300):
        components = [
            (generator.choice(types), generator.choice([0, 1, 2, 5]), generator.choice([None, "alice", "x"]))
            for _ in range(generator.randrange(0, 12))
        ]
        frame = describe_request(components)
        body = body_of(frame)
        whole = decode_describe(frame, body, 1, len(components) + 1)
        bounded = decode_describe(frame, body, 1, DESCRIBE_COMPONENTS_DECODED)
        assert len(bounded.components) <= DESCRIBE_COMPONENTS_DECODED
        assert describe(quotas, bounded) == describe(quotas, whole), components


# the Metadata response: brokers replaced in place, topics walked, never decoded ------------------
def metadata_message(version: int) -> MetadataResponse:
    broker = MetadataResponse.MetadataResponseBroker
    topic = MetadataResponse.MetadataResponseTopic
    partition = topic.MetadataResponsePartition
    extra = {"cluster_id": "c1"} if version >= 2 else {}
    return MetadataResponse(
        version=version,
        throttle_time_ms=3,
        brokers=[
            broker(
                version=version, node_id=n, host=f"kafka-{n}.internal", port=9092 + n, rack=f"r{n}" if n % 2 else None
            )
            for n in (1, 2, 3)
        ],
        controller_id=2,
        topics=[
            topic(
                version=version,
                error_code=code,
                name=name,
                is_internal=False,
                partitions=[
                    partition(version=version, partition_index=i, leader_id=1, replica_nodes=[1, 2], isr_nodes=[1])
                    for i in range(count)
                ],
            )
            for name, count, code in (("orders", 6, 0), ("ghost", 0, 3), ("clicks", 2, 0))
        ],
        **extra,
    )


@pytest.mark.parametrize("version", range(0, 14))
def test_a_metadata_rewrite_changes_the_brokers_addresses_and_not_one_other_byte(version: int) -> None:
    original = response_frame(ApiKey.METADATA, version, metadata_message(version))
    recorder = Recorder()
    rewritten = memoryview(rewrite_metadata(original, version, recorder))
    body = response_body_offset(rewritten, ApiKey.METADATA, version)
    out = MetadataResponse.decode(rewritten[body:], version=version)
    expected = MetadataResponse.decode(original[body:], version=version)
    for broker in expected.brokers:
        broker.host, broker.port = "proxy.example", 20000 + broker.node_id
    assert out.to_dict() == expected.to_dict()
    assert recorder.seen == {n: (f"kafka-{n}.internal", 9092 + n) for n in (1, 2, 3)}
    assert [(name, count) for name, _id, count in recorder.topics] == [("orders", 6), ("clicks", 2)]
    assert bytes(rewritten[-40:]) == bytes(original[-40:]), "the topics are copied as they came"


def test_the_first_record_batch_is_found_behind_partitions_that_carry_none() -> None:
    frame = produce(1, {"a": b"", "b": b""})
    assert produce_producer_id(memoryview(frame), body_of(frame), 8) == -1
    batch = bytearray(70)
    batch[16] = 2  # magic
    batch[43:51] = (4242).to_bytes(8, "big")
    frame = produce(1, {"a": b"", "b": bytes(batch)})
    assert produce_producer_id(memoryview(frame), body_of(frame), 8) == 4242
