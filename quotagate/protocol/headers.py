"""The protocol's readers on the Python side, over frames that still carry their size prefix: a
request's header as the session core hands it to the hooks (`RequestHeader`; the core peeks at it
itself), where a response's body starts, and the varints, strings, counts and tagged fields the
decoders outside the compiled walks read, raising FrameError where the walks return a past-the-end
position. Varints and tagged fields are read by produce_walk's one reader of each.

Request header v1/v2: api_key int16, api_version int16, correlation_id int32, client_id nullable
int16-length string, then (v2, flexible versions) tagged fields. Response header v0/v1:
correlation_id int32, then (v1) tagged fields.
"""

from __future__ import annotations

from struct import Struct, pack, unpack_from
from typing import NamedTuple

from quotagate.protocol.apis import response_header_is_flexible
from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError
from quotagate.protocol.limits import tagged_fields_problem

# The interpreted source, which reads a memoryview as it is: these readers are not on the compiled path.
from quotagate.protocol.produce_walk import _skip_tags, _uvarint

_CORRELATION_ID = Struct(">i")


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # offset of the body within the frame (size prefix included)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The unsigned varint at pos, read by produce_walk's one varint reader: (value, position after
    it). Raises FrameError when it runs past the end of `buf` or is longer than Kafka's 5 bytes."""
    value, after = _uvarint(buf, pos, len(buf))
    if value < 0:
        raise FrameError("truncated or over-long varint")
    return value, after


def skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    """The position after the tagged fields at pos, skipped by produce_walk's reader (by their lengths;
    more than MAX_TAGGED_FIELDS are refused, not walked). Raises FrameError when they run past the end."""
    end = len(buf)
    after = _skip_tags(buf, pos, end)
    if after > end:
        count, _ = _uvarint(buf, pos, end)
        raise FrameError(tagged_fields_problem("a tagged-field section", count) or "truncated tagged fields")
    return after


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


def response_body_offset(frame: memoryview, api_key: int, api_version: int) -> int:
    """Offset of a response's body within its frame (size prefix included)."""
    pos = FRAME_SIZE_BYTES + _CORRELATION_ID.size
    if response_header_is_flexible(api_key, api_version):
        pos = skip_tagged_fields(frame, pos)
    return pos
