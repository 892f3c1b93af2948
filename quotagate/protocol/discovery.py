"""The proxy's own Metadata request, used to discover the brokers it fronts before any client asks."""

from __future__ import annotations

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError

# v1 is the oldest version where an empty topic list means "no topics" (v0: all topics); it is
# non-flexible, so the response header is just the correlation id.
DISCOVERY_METADATA_VERSION = 1
DISCOVERY_CLIENT_ID = "quotagate-discovery"


def encode_discovery_request(correlation_id: int) -> bytes:
    request = MetadataRequest(version=DISCOVERY_METADATA_VERSION, topics=[])
    request.with_header(correlation_id=correlation_id, client_id=DISCOVERY_CLIENT_ID)
    return bytes(request.encode(header=True, framed=True))


def decode_discovery_brokers(frame: bytes, correlation_id: int) -> list[tuple[int, str, int]]:
    """(node_id, host, port) of every broker in the answer to encode_discovery_request."""
    view = memoryview(frame)
    if len(view) < FRAME_SIZE_BYTES + 4 or int.from_bytes(view[4:8], "big", signed=True) != correlation_id:
        raise FrameError("discovery metadata response does not match its request")
    try:
        response = MetadataResponse.decode(view[8:], version=DISCOVERY_METADATA_VERSION)
    except Exception as exc:
        raise FrameError(f"cannot decode discovery metadata response: {exc}") from exc
    return [(b.node_id, b.host, b.port) for b in response.brokers]
