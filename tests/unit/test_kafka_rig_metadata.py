"""The rig's readiness probe reads brokers and the controller with kafka-python's Metadata classes."""

from __future__ import annotations

from struct import pack

import pytest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from kafka_rig.metadata import CORRELATION_ID, METADATA_VERSION, brokers_and_controller, metadata_request


def metadata_answer(correlation_id: int, node_ids: list[int], controller_id: int) -> bytes:
    broker = MetadataResponse.MetadataResponseBroker
    response = MetadataResponse(
        version=METADATA_VERSION,
        throttle_time_ms=0,
        brokers=[
            broker(version=METADATA_VERSION, node_id=node_id, host="127.0.0.1", port=9092 + node_id, rack=rack)
            for node_id, rack in zip(node_ids, ["rack-a", None, "r"], strict=False)
        ],
        cluster_id="test3",
        controller_id=controller_id,
        topics=[],
    )
    return pack(">i", correlation_id) + bytes(response.encode())


def test_the_probe_asks_v4_metadata_for_no_topics() -> None:
    frame = metadata_request()
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    api_key, version, correlation_id = int.from_bytes(frame[4:6]), int.from_bytes(frame[6:8]), frame[8:12]
    assert (api_key, version, int.from_bytes(correlation_id)) == (3, 4, CORRELATION_ID)
    request = MetadataRequest.decode(memoryview(frame)[12 + 2 + len("kafka-rig") :], version=4)
    assert request.topics == [] and request.allow_auto_topic_creation is False


def test_brokers_come_back_sorted_with_the_controller() -> None:
    assert brokers_and_controller(metadata_answer(CORRELATION_ID, [3, 1, 2], 2)) == ([1, 2, 3], 2)


def test_a_cluster_without_an_active_controller_says_minus_one() -> None:
    assert brokers_and_controller(metadata_answer(CORRELATION_ID, [1], -1)) == ([1], -1)


def test_an_answer_to_another_request_is_refused() -> None:
    with pytest.raises(ConnectionError, match="correlation id 9"):
        brokers_and_controller(metadata_answer(9, [1], 1))
