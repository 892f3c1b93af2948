"""The proxy's own requests to brokers: Metadata (the brokers it fronts and the cluster's topics,
before any client asks) and the ApiVersions readiness probe (does a broker answer at all)."""

from __future__ import annotations

from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest, MetadataResponse

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError, decoded, frame_errors
from quotagate.protocol.headers import response_body_offset

# v12: a version every Kafka from 2.8 to 4.x speaks (4.0 dropped v0-3), with topic ids; a null
# topic list asks for every topic.
DISCOVERY_METADATA_VERSION = 12
DISCOVERY_CLIENT_ID = "quotagate-discovery"


def encode_discovery_request(correlation_id: int) -> bytes:
    request = MetadataRequest(
        version=DISCOVERY_METADATA_VERSION,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    request.with_header(correlation_id=correlation_id, client_id=DISCOVERY_CLIENT_ID)
    return bytes(request.encode(header=True, framed=True))


@frame_errors("discovery Metadata response")
def decode_discovery(
    frame: bytes, correlation_id: int
) -> tuple[list[tuple[int, str, int]], list[tuple[str, object, int]]]:
    """Brokers (node_id, host, port) and topics (name, id, partitions) in the discovery answer."""
    view = memoryview(frame)
    if len(view) < FRAME_SIZE_BYTES + 4 or int.from_bytes(view[4:8], "big", signed=True) != correlation_id:
        raise FrameError("discovery metadata response does not match its request")
    body_offset = response_body_offset(view, ApiKey.METADATA, DISCOVERY_METADATA_VERSION)
    response = decoded(MetadataResponse, view, body_offset, DISCOVERY_METADATA_VERSION)
    brokers = [(b.node_id, b.host, b.port) for b in response.brokers]
    topics = [(t.name, t.topic_id, len(t.partitions)) for t in response.topics if t.error_code == 0 and t.name]
    return brokers, topics


def encode_probe_request(correlation_id: int) -> bytes:
    """ApiVersions v0: every broker answers it, before authentication too, and cheaply."""
    request = ApiVersionsRequest(version=0)
    request.with_header(correlation_id=correlation_id, client_id=DISCOVERY_CLIENT_ID)
    return bytes(request.encode(header=True, framed=True))


def is_probe_answer(frame: bytes, correlation_id: int) -> bool:
    """Whether `frame` is the broker's answer to the probe with that correlation id."""
    return len(frame) >= FRAME_SIZE_BYTES + 4 and int.from_bytes(frame[4:8], "big", signed=True) == correlation_id
