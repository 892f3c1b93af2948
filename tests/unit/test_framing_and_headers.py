from struct import pack

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from quotagate.protocol.framing import FrameError
from quotagate.protocol.headers import peek_correlation_id, peek_request_header, response_body_offset
from quotagate.protocol.produce import produce_request_acks


def frame(payload: bytes) -> bytes:
    return pack(">i", len(payload)) + payload


def encoded_request(message, correlation_id: int = 7, client_id: str | None = "app-1") -> memoryview:
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    return memoryview(bytes(message.encode(header=True, framed=True)))


@pytest.mark.parametrize("version", [0, 4, 8, 9, 12, 13])
def test_request_header_peek_reads_key_version_correlation_and_client_id(version: int) -> None:
    request = encoded_request(MetadataRequest(version=version, topics=[]), correlation_id=4242)
    header = peek_request_header(request)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, version, 4242, "app-1")
    decoded = MetadataRequest.decode(request[header.body_offset :], version=version)
    assert decoded.topics == []


def test_request_header_peek_handles_a_null_client_id() -> None:
    header = peek_request_header(encoded_request(ApiVersionsRequest(version=0), client_id=None))
    assert header.client_id is None and header.body_offset == 4 + 10


def test_request_header_peek_refuses_a_short_frame() -> None:
    with pytest.raises(FrameError, match="shorter than a header"):
        peek_request_header(memoryview(frame(b"\x00\x03")))


@pytest.mark.parametrize("version", [3, 5, 8, 9, 11, 13])
@pytest.mark.parametrize("transactional_id", [None, "tx-1"])
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_is_read_behind_the_transactional_id(
    version: int, transactional_id: str | None, acks: int
) -> None:
    request = encoded_request(
        ProduceRequest(version=version, transactional_id=transactional_id, acks=acks, timeout_ms=100, topic_data=[])
    )
    header = peek_request_header(request)
    assert produce_request_acks(request, header.body_offset, version) == acks


def test_response_body_offset_skips_flexible_header_tags_but_not_for_api_versions() -> None:
    response = memoryview(frame(pack(">i", 99) + b"\x00" + b"body"))
    assert peek_correlation_id(response) == 99
    assert response_body_offset(response, 3, 12) == 9  # Metadata v12: header v1 with tags
    assert response_body_offset(response, 3, 8) == 8  # Metadata v8: header v0
    assert response_body_offset(response, 18, 3) == 8  # ApiVersions: always header v0
