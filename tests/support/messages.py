"""Test messages built with kafka-python's classes, shared by the protocol tests."""

from io import BytesIO
from struct import pack, unpack_from

from kafka.protocol.admin import AlterClientQuotasRequest, CreateTopicsRequest, DescribeClientQuotasRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from quotagate.protocol.apis import is_flexible
from quotagate.protocol.headers import RequestHeader


def request_header(frame: bytes | memoryview) -> RequestHeader:
    """The header of a well-formed request frame (size prefix included) as kafka-python's own decoder
    reads it, with where its body starts: what a test hands a protocol function with the body. The
    proxy's own peek is the session core's, tested through the session."""
    api_key, version = unpack_from(">hh", frame, 4)
    data = BytesIO(bytes(frame[4:]))
    header = ProduceRequest.header_class.decode(data, flexible=is_flexible(api_key, version))
    return RequestHeader(api_key, version, header.correlation_id, header.client_id, 4 + data.tell())


def produce_response(
    version: int, throttle: int, endpoints: bool = False, topics: int = 2, partitions: int = 3
) -> ProduceResponse:
    """A produce response with `topics` × `partitions` results, record errors from v8 and, if asked,
    KIP-951 NodeEndpoints: enough structure to exercise every walk over it."""
    topic = ProduceResponse.TopicProduceResponse
    partition = topic.PartitionProduceResponse
    error = partition.BatchIndexAndErrorMessage
    entries = []
    for t in range(topics):
        results = [
            partition(
                version=version,
                index=p,
                error_code=0,
                base_offset=1000 + p,
                **(
                    {
                        "record_errors": [error(version=version, batch_index=1, batch_index_error_message="x")] * p,
                        "error_message": "oops" if p == 2 else None,
                    }
                    if version >= 8
                    else {}
                ),
            )
            for p in range(partitions)
        ]
        name = {"name": f"topic-{t}"} if version < 13 else {"topic_id": "0" * 31 + str(t)}
        entries.append(topic(version=version, partition_responses=results, **name))
    fields = {}
    if endpoints:
        node = ProduceResponse.NodeEndpoint
        fields["node_endpoints"] = [node(version=version, node_id=2, host="kafka-2", port=9092, rack="r")]
    return ProduceResponse(version=version, responses=entries, throttle_time_ms=throttle, **fields)


# Share groups (KIP-932): kafka-python has no classes for these, so they are encoded by hand here,
# field by field after Kafka's ShareFetchResponse.json / ShareAcknowledgeResponse.json, and checked
# against bytes Kafka 4.2 itself encodes (tests/unit/test_share.py).
SHARE_TOPIC_ID = bytes(range(1, 17))


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def compact(data: bytes | str | None) -> bytes:
    """A compact (nullable) string or bytes."""
    if data is None:
        return b"\x00"
    raw = data.encode() if isinstance(data, str) else data
    return uvarint(len(raw) + 1) + raw


def compact_array(entries: list[bytes]) -> bytes:
    return uvarint(len(entries) + 1) + b"".join(entries)


def share_response_body(
    api_key: int,
    version: int,
    partitions: list[tuple[int, int, str | None, bytes]],
    endpoints: list[tuple[int, str, int, str | None]],
    topics: int = 1,
    tags: bytes = b"\x00",
) -> bytes:
    """A ShareFetch (78) or ShareAcknowledge (79) response body: `topics` topics with the same
    partitions (index, error code, error message, records), leader 2 epoch 4 each, one acquired
    record batch per fetched partition that has records, and NodeEndpoints (node id, host, port, rack)."""
    fetch = api_key == 78
    entries = []
    for index, error_code, message, records in partitions:
        if fetch:
            acquired = [pack(">qqh", 0, 0, 1) + b"\x00"] if records else []
            entries.append(
                pack(">ih", index, error_code)
                + compact(message)
                + pack(">h", 0)
                + compact(None)
                + pack(">ii", 2 if error_code else 1, 4 if error_code else 3)
                + b"\x00"
                + compact(records)
                + compact_array(acquired)
                + b"\x00"
            )
        else:
            entries.append(pack(">ih", index, error_code) + compact(message) + pack(">ii", 2, 4) + b"\x00" + b"\x00")
    topic = SHARE_TOPIC_ID + compact_array(entries) + b"\x00"
    nodes = [
        pack(">i", node) + compact(host) + pack(">i", port) + compact(rack) + b"\x00"
        for node, host, port, rack in endpoints
    ]
    lock_timeout = pack(">i", 30000) if (fetch and version >= 1) or version >= 2 else b""
    return (
        pack(">ih", 7, 0) + compact(None) + lock_timeout + compact_array([topic] * topics) + compact_array(nodes) + tags
    )


# Requests of the quota admin and mutation APIs, framed with a header (client id "app").
def framed_request(message, correlation_id: int = 7) -> bytes:  # type: ignore[no-untyped-def]
    message.with_header(correlation_id=correlation_id, client_id="app")
    return bytes(message.encode(header=True, framed=True))


def alteration_request(names: list[str | None], version: int = 1, validate_only: bool = False) -> bytes:
    cls = AlterClientQuotasRequest
    return framed_request(
        cls(
            version=version,
            entries=[
                cls.EntryData(
                    version=version,
                    entity=[cls.EntryData.EntityData(version=version, entity_type="user", entity_name=name)]
                    + (
                        [cls.EntryData.EntityData(version=version, entity_type="client-id", entity_name="c")]
                        if i % 2
                        else []
                    ),
                    ops=[cls.EntryData.OpData(version=version, key="producer_byte_rate", value=10.0 * i, remove=False)],
                )
                for i, name in enumerate(names)
            ],
            validate_only=validate_only,
        )
    )


def create_topics_request(count: int, version: int = 6) -> bytes:
    topic = CreateTopicsRequest.CreatableTopic
    return framed_request(
        CreateTopicsRequest(
            version=version,
            topics=[
                topic(version=version, name=f"t{i}", num_partitions=3, replication_factor=1, assignments=[], configs=[])
                for i in range(count)
            ],
            timeout_ms=1000,
            validate_only=False,
        )
    )


def describe_request(components: list[tuple[str, int, str | None]], version: int = 1) -> bytes:
    cls = DescribeClientQuotasRequest
    return framed_request(
        cls(
            version=version,
            components=[
                cls.ComponentData(version=version, entity_type=t, match_type=m, match=n) for t, m, n in components
            ],
            strict=False,
        )
    )
