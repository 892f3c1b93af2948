"""Cheap peeks at request and response headers, on frames that still carry their size prefix.

Request header v1/v2: api_key int16, api_version int16, correlation_id int32, client_id nullable
int16-length string, then (v2, flexible versions) tagged fields. Response header v0/v1:
correlation_id int32, then (v1) tagged fields. Only these fields are read; bodies are left alone.
"""

from __future__ import annotations

from struct import Struct, pack, unpack_from
from typing import NamedTuple

from quotagate.protocol.apis import is_flexible, response_header_is_flexible
from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError
from quotagate.protocol.limits import tagged_fields_problem

_REQUEST_FIXED = Struct(">hhih")
_CORRELATION_ID = Struct(">i")


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # offset of the body within the frame (size prefix included)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decodes an unsigned varint at pos; returns (value, position after it)."""
    if pos < len(buf) and buf[pos] < 0x80:  # nearly every count and length in practice: one byte
        return buf[pos], pos + 1
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise FrameError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise FrameError("varint longer than 5 bytes")


def skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    """Skips tagged fields by their lengths; more than MAX_TAGGED_FIELDS are refused, not walked."""
    if pos < len(buf) and buf[pos] == 0:  # no tagged fields: the usual case
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    problem = tagged_fields_problem("a tagged-field section", count)
    if problem is not None:
        raise FrameError(problem)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise FrameError("truncated tagged fields")
    return pos


def skip_string(buf: bytes | memoryview, pos: int, flexible: bool) -> int:
    """Skips a (nullable) string: int16 length, or in flexible versions uvarint length + 1."""
    if flexible:
        length_plus_one, pos = read_uvarint(buf, pos)
        return pos + max(length_plus_one - 1, 0)
    (length,) = unpack_from(">h", buf, pos)
    return pos + 2 + max(length, 0)


def read_string(buf: bytes | memoryview, pos: int, flexible: bool) -> tuple[str | None, int]:
    """A (nullable) string and the position after it."""
    if flexible:
        length_plus_one, pos = read_uvarint(buf, pos)
        length = length_plus_one - 1
    else:
        (length,) = unpack_from(">h", buf, pos)
        pos += 2
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise FrameError("string runs past the end of the message")
    return str(buf[pos : pos + length], "utf-8", "replace"), pos + length


def encode_string(text: str | None, flexible: bool) -> bytes:
    """A (nullable) string as Kafka encodes it: compact (uvarint length + 1) when flexible, else int16."""
    if text is None:
        return b"\x00" if flexible else pack(">h", -1)
    data = text.encode()
    return (encode_count(len(data), True) if flexible else pack(">h", len(data))) + data


def read_count(buf: bytes | memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        count_plus_one, pos = read_uvarint(buf, pos)
        return max(count_plus_one - 1, 0), pos
    (count,) = unpack_from(">i", buf, pos)
    return max(count, 0), pos + 4


def encode_count(count: int, flexible: bool) -> bytes:
    """An array's count: int32, or in flexible versions uvarint count + 1."""
    return encode_uvarint(count + 1) if flexible else pack(">i", count)


def encode_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def peek_request_header(frame: memoryview) -> RequestHeader:
    """Reads a request's header. Raises FrameError when the frame is too short to hold one."""
    if len(frame) < FRAME_SIZE_BYTES + _REQUEST_FIXED.size:
        raise FrameError(f"request of {len(frame) - FRAME_SIZE_BYTES} bytes is shorter than a header")
    api_key, api_version, correlation_id, client_id_len = _REQUEST_FIXED.unpack_from(frame, FRAME_SIZE_BYTES)
    pos = FRAME_SIZE_BYTES + _REQUEST_FIXED.size
    client_id: str | None = None
    if client_id_len >= 0:
        if pos + client_id_len > len(frame):
            raise FrameError("client_id runs past the end of the request")
        client_id = str(frame[pos : pos + client_id_len], "utf-8", "replace")  # decoded in place, no copy
        pos += client_id_len
    if is_flexible(api_key, api_version):
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def peek_correlation_id(frame: memoryview) -> int:
    if len(frame) < FRAME_SIZE_BYTES + _CORRELATION_ID.size:
        raise FrameError("response shorter than a correlation id")
    return unpack_from(">i", frame, FRAME_SIZE_BYTES)[0]


def response_body_offset(frame: memoryview, api_key: int, api_version: int) -> int:
    """Offset of a response's body within its frame (size prefix included)."""
    pos = FRAME_SIZE_BYTES + _CORRELATION_ID.size
    if response_header_is_flexible(api_key, api_version):
        pos = skip_tagged_fields(frame, pos)
    return pos
