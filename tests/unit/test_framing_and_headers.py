"""A request's header as the proxy reads it (the session core's peek, on both builds) and a response's
body offset. The header peek is the session's own: these tests feed it requests and read the
exchange it records."""

from struct import pack

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from quotagate import compiled
from quotagate.protocol.apis import ApiKey
from quotagate.protocol.framing import FrameError
from quotagate.protocol.headers import read_uvarint, response_body_offset
from quotagate.protocol.version_caps import MAX_VERSIONS
from tests.support.builds import Build

produce_walk = compiled.load("quotagate.protocol.produce_walk")


def frame(payload: bytes) -> bytes:
    return pack(">i", len(payload)) + payload


def encoded_request(message, correlation_id: int = 7, client_id: str | None = "app-1") -> bytes:
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(message.encode(header=True, framed=True))


@pytest.mark.parametrize("version", [0, 4, 8, 9, 12, 13])
def test_request_header_peek_reads_key_version_correlation_and_client_id(build: Build, version: int) -> None:
    session, _ = build.session_with()
    request = encoded_request(MetadataRequest(version=version, topics=[]), correlation_id=4242)
    session.client_data(request, 0.0)
    (sent,) = session.in_flight
    assert (sent.api_key, sent.api_version, sent.correlation_id, sent.client_id) == (3, version, 4242, "app-1")
    assert b"".join(bytes(part) for part in session.to_broker) == request


def test_request_header_peek_takes_a_null_client_id_as_the_empty_one(build: Build) -> None:
    session, _ = build.session_with()
    session.client_data(encoded_request(ApiVersionsRequest(version=0), client_id=None), 0.0)
    assert [(sent.api_key, sent.client_id) for sent in session.in_flight] == [(18, "")]


def test_request_header_peek_refuses_a_short_frame(build: Build) -> None:
    session, _ = build.session_with()
    session.client_data(frame(b"\x00\x03"), 0.0)
    assert session.refusal is not None and "shorter than a header" in str(session.refusal)
    assert not session.in_flight and not session.to_broker


@pytest.mark.parametrize("version", sorted({3, 5, 8, 9, 11, MAX_VERSIONS[ApiKey.PRODUCE]}))
@pytest.mark.parametrize("transactional_id", [None, "tx-1"])
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_is_read_behind_the_transactional_id(
    build: Build, version: int, transactional_id: str | None, acks: int
) -> None:
    """acks=0: the broker sends no response, so nothing waits for one."""
    session, _ = build.session_with()
    request = ProduceRequest(
        version=version, transactional_id=transactional_id, acks=acks, timeout_ms=100, topic_data=[]
    )
    session.client_data(encoded_request(request), 0.0)
    assert session.refusal is None
    assert len(session.in_flight) == (0 if acks == 0 else 1)


def test_response_body_offset_skips_flexible_header_tags_but_not_for_api_versions() -> None:
    response = memoryview(frame(pack(">i", 99) + b"\x00" + b"body"))
    assert response_body_offset(response, 3, 12) == 9  # Metadata v12: header v1 with tags
    assert response_body_offset(response, 3, 8) == 8  # Metadata v8: header v0
    assert response_body_offset(response, 18, 3) == 8  # ApiVersions: always header v0


@pytest.mark.parametrize(
    ("data", "value"),
    [(b"\x00", 0), (b"\x7f", 127), (b"\x80\x01", 128), (b"\xff\xff\xff\xff\x07", 2**31 - 1), (b"\x80", None),
     (b"\xff" * 5 + b"\x01", None)],
)  # fmt: skip
def test_the_python_readers_read_a_varint_as_the_walks_do(data: bytes, value: int | None) -> None:
    """One varint reader: headers.read_uvarint is produce_walk's, raising where the walk says past the end."""
    framed = memoryview(b"\x09" + data + b"\x09")[1 : 1 + len(data)]
    walked = produce_walk._uvarint(bytes(data), 0, len(data))
    if value is None:
        assert walked[0] < 0
        with pytest.raises(FrameError, match="varint"):
            read_uvarint(framed, 0)
    else:
        assert walked == read_uvarint(framed, 0) == (value, len(data))
