"""CreateTopics, DeleteTopics and CreatePartitions requests and their results, built with kafka-python's
classes, in every version the mutation tests cover."""

from __future__ import annotations

from struct import pack

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from quotagate.protocol.apis import ApiKey, is_flexible

NAMES = ["t0", "t1", "t2"]


def framed(message, correlation_id: int = 4) -> memoryview:
    message.with_header(correlation_id=correlation_id, client_id="admin")
    return memoryview(bytes(message.encode(header=True, framed=True)))


def create_topics(version: int) -> CreateTopicsRequest:
    topic = CreateTopicsRequest.CreatableTopic
    return CreateTopicsRequest(
        version=version,
        topics=[
            topic(
                version=version, name=n, num_partitions=10 * (i + 1), replication_factor=1, assignments=[], configs=[]
            )
            for i, n in enumerate(NAMES)
        ],
        timeout_ms=1000,
        **({"validate_only": False} if version >= 1 else {}),
    )


def delete_topics(version: int) -> DeleteTopicsRequest:
    if version >= 6:
        state = DeleteTopicsRequest.DeleteTopicState
        return DeleteTopicsRequest(
            version=version, topics=[state(version=version, name=n) for n in NAMES], timeout_ms=1000
        )
    return DeleteTopicsRequest(version=version, topic_names=NAMES, timeout_ms=1000)


def create_partitions(version: int) -> CreatePartitionsRequest:
    topic = CreatePartitionsRequest.CreatePartitionsTopic
    return CreatePartitionsRequest(
        version=version,
        topics=[topic(version=version, name=n, count=5, assignments=None) for n in NAMES],
        timeout_ms=1000,
        validate_only=False,
    )


CASES = (
    [(ApiKey.CREATE_TOPICS, v, create_topics) for v in range(2, 8)]
    + [(ApiKey.DELETE_TOPICS, v, delete_topics) for v in range(1, 7)]
    + [(ApiKey.CREATE_PARTITIONS, v, create_partitions) for v in range(0, 4)]
)


def result_entries(api_key: int, version: int, names: list[str]) -> object:
    if api_key == ApiKey.CREATE_TOPICS:
        entry = CreateTopicsResponse.CreatableTopicResult
        extra = {"num_partitions": 10, "replication_factor": 1, "configs": []} if version >= 5 else {}
        return CreateTopicsResponse(
            version=version,
            throttle_time_ms=0,
            topics=[entry(version=version, name=n, error_code=0, **extra) for n in names],
        )
    if api_key == ApiKey.DELETE_TOPICS:
        entry = DeleteTopicsResponse.DeletableTopicResult
        return DeleteTopicsResponse(
            version=version, throttle_time_ms=0, responses=[entry(version=version, name=n, error_code=0) for n in names]
        )
    entry = CreatePartitionsResponse.CreatePartitionsTopicResult
    return CreatePartitionsResponse(
        version=version, throttle_time_ms=0, results=[entry(version=version, name=n, error_code=0) for n in names]
    )


def response_frame(api_key: int, version: int, message) -> bytes:
    header = pack(">i", 4) + (b"\x00" if is_flexible(api_key, version) else b"")
    body = bytes(message.encode(version=version))
    return pack(">i", len(header) + len(body)) + header + body
