"""The walks over produce messages that run per request: where a request's topics sit, and where
throttle_time_ms sits in the response nearly every produce gets back.

`produce_topics` is the one walk of a produce request's topics: produce.py's layout (thresholds,
refusals) and the session core's usage records both read it. `usual_throttle_offset` finds the
throttle in the usual response shape: flexible (v9+), no record errors, no tagged fields inside,
every count and length one byte. produce.py's general walk starts with it, and the session core
(proxy/session_core.py) reads it to tell a response that names no broker (no top-level tags).

Compiled as produce_walk_c (typed by produce_walk_c.pxd), interpreted as it is: quotagate/compiled.py.
"""

try:
    import cython
except ImportError:  # interpreted without Cython installed: quotagate/_cython_shadow.py
    from quotagate import _cython_shadow as cython

from quotagate.protocol import buffers
from quotagate.protocol.limits import MAX_ARRAY_ELEMENTS, MAX_STRING_BYTES, MAX_TAGGED_FIELDS

# index, error_code, base_offset, log_append_time_ms, log_start_offset
PARTITION_BYTES = 30
TRANSACTIONAL_ID_FROM = 3
TOPIC_ID_FROM = 13  # Produce v13 (KIP-516) names topics by id: 16 bytes, not a string
# The same as Python names of the compiled module too (a cdef int is not one): produce.py reads them.
PRODUCE_TRANSACTIONAL_ID_FROM = TRANSACTIONAL_ID_FROM
PRODUCE_TOPIC_ID_FROM = TOPIC_ID_FROM
# Kafka's readers' limits (protocol/limits.py): a request past one is malformed.
MAX_TAGS = MAX_TAGGED_FIELDS
MAX_ARRAY = MAX_ARRAY_ELEMENTS
MAX_STRING = MAX_STRING_BYTES


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """The unsigned varint at buf[pos] (Kafka's, at most 5 bytes): (value, position after it), or
    (-1, end + 1) when it runs past `end` or is longer. The one varint reader: the walks, the session
    core and protocol/headers.py's readers all call it."""
    if pos < end and buf[pos] < 0x80:  # nearly every count and length: one byte
        return buf[pos], pos + 1
    value = 0
    shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            break
    return -1, end + 1


def i32(buf: bytes, pos: int) -> int:
    """The big-endian int32 at buf[pos:pos + 4]: the compiled modules' one reader of it."""
    high = buf[pos] - 256 if buf[pos] >= 128 else buf[pos]  # the sign byte
    # No literal past a C int: Cython makes those Python objects, and each read then boxes.
    return high * 0x1000000 + ((buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3])


def produce_acks(buf: bytes, body: int, end: int, version: int) -> int:
    """A produce request's acks (0: the broker sends no response) from its body at buf[body:end];
    a value below -0x8000 (outside int16) when what leads to them runs past `end` or is malformed."""
    at = body
    if version >= TRANSACTIONAL_ID_FROM:  # transactional_id comes first
        at = _after_transactional_id(buf, at, end, version >= 9)
    if at + 2 > end:
        return -0x10000
    value = (buf[at] << 8) | buf[at + 1]
    return value - 0x10000 if value >= 0x8000 else value


def produce_topics_of(frame: bytes | memoryview, pos: int, end: int, version: int, names_only: bool) -> list | None:
    """produce_topics of a frame that may be a memoryview."""
    return produce_topics(buffers.chars(frame), pos, end, version, names_only)


def produce_topics(buf: bytes, pos: int, end: int, version: int, names_only: bool) -> list | None:
    """The topics of a produce request whose body starts at buf[pos] and which ends at end:
    (name as bytes, start, end, where its partition array starts, record bytes) each, or the names
    alone, in order, the record batches (or v0-v2's message sets) never read; None when the request
    is truncated or malformed."""
    flexible = version >= 9
    pos = _topics_start(buf, pos, end, version)
    count, pos = _count(buf, pos, end, flexible)
    if count < 0:
        return None
    topics = []
    for _t in range(count):
        start = pos
        length, pos = _string_length(buf, pos, end, flexible)
        if length < 0 or length > MAX_STRING or pos + length > end:
            return None
        name = cython.cast(bytes, buf[pos : pos + length])  # compiled, the char*'s slice is bytes already
        pos += length
        partitions_at = pos
        partition_count, pos = _count(buf, pos, end, flexible)
        if partition_count < 0:
            return None
        record_bytes = 0
        for _p in range(partition_count):
            if pos + 4 > end:
                return None
            pos += 4
            if flexible:
                size, pos = _uvarint(buf, pos, end)
                size -= 1
            else:
                if pos + 4 > end:
                    return None
                size = i32(buf, pos)
                pos += 4
            if size > 0:
                pos += size
                record_bytes += size
            if flexible:
                pos = _skip_tags(buf, pos, end)
            if pos > end:
                return None
        if flexible:
            pos = _skip_tags(buf, pos, end)
        if pos > end:
            return None
        if names_only:
            topics.append(name)
        else:
            topics.append((name, start, pos, partitions_at, record_bytes))
    return topics


def topics_start_of(frame: bytes | memoryview, pos: int, version: int) -> int:
    """Where the topic array of a produce request (a frame that may be a memoryview) whose body starts
    at `pos` starts: _topics_start's answer, past the frame's end when what leads to it runs past it."""
    return _topics_start(buffers.chars(frame), pos, len(frame), version)


def first_batch_of(frame: bytes | memoryview, pos: int, end: int, version: int, least: int) -> int:
    """first_batch of a frame that may be a memoryview."""
    return first_batch(buffers.chars(frame), pos, end, version, least)


def first_batch(buf: bytes, pos: int, end: int, version: int, least: int) -> int:
    """Where the records of the first partition of a produce request (body at buf[pos], ending at
    `end`) that carries at least `least` bytes of them start; -1 when none does, -2 when the request
    is malformed. The walk stops there: a producer's first batch speaks for all of them."""
    flexible = version >= 9
    pos = _topics_start(buf, pos, end, version)
    count, pos = _count(buf, pos, end, flexible)
    if count < 0:
        return -2
    for _t in range(count):
        length, pos = _string_length(buf, pos, end, flexible)
        if length < 0 or length > MAX_STRING:
            return -2
        pos += length
        partitions, pos = _count(buf, pos, end, flexible)
        if partitions < 0:
            return -2
        for _p in range(partitions):
            pos += 4  # the partition's index
            if flexible:
                size, pos = _uvarint(buf, pos, end)
                size -= 1
            else:
                if pos + 4 > end:
                    return -2
                size = i32(buf, pos)
                pos += 4
            if size >= least and pos + size <= end:
                return pos
            if size > 0:
                pos += size
            if flexible:
                pos = _skip_tags(buf, pos, end)
            if pos > end:
                return -2
        if flexible:
            pos = _skip_tags(buf, pos, end)
        if pos > end:
            return -2
    return -1


def _string_length(buf: bytes, pos: int, end: int, flexible: bool) -> tuple[int, int]:
    """A (nullable) string's length (-1: null) and the position after its length prefix: int16, or
    uvarint length + 1 when flexible; (-2, end + 1) when the prefix runs past `end`."""
    if flexible:
        value, pos = _uvarint(buf, pos, end)
        if value < 0:
            return -2, end + 1
        return value - 1, pos
    if pos + 2 > end:
        return -2, end + 1
    length = (buf[pos] << 8) | buf[pos + 1]
    return (length - 0x10000 if length >= 0x8000 else length), pos + 2


def _topics_start(buf: bytes, pos: int, end: int, version: int) -> int:
    """Where a produce request's topic array starts, from its body at buf[pos]: after transactional_id
    (v3+; Produce v0-v2, which Kafka 3.x still takes, have none), acks and timeout_ms."""
    if version >= TRANSACTIONAL_ID_FROM:
        pos = _after_transactional_id(buf, pos, end, version >= 9)
    return pos + 6


def _after_transactional_id(buf: bytes, pos: int, end: int, flexible: bool) -> int:
    """Where a produce request's transactional_id (at buf[pos]) ends: past `end` when it runs past it."""
    length, pos = _string_length(buf, pos, end, flexible)
    return pos + length if length > 0 else pos


def _count(buf: bytes, pos: int, end: int, flexible: bool) -> tuple[int, int]:
    """An array's count within Kafka's limits (no more than MAX_ARRAY, nor than the bytes left), and
    the position after it; (-1, pos) when it breaks them or runs past `end` (0 for a null array)."""
    if flexible:
        count, pos = _uvarint(buf, pos, end)
        count -= 1
    else:
        if pos + 4 > end:
            return -1, pos
        count = i32(buf, pos)
        pos += 4
    if pos > end or count > MAX_ARRAY or count > end - pos:
        return -1, pos
    return (count if count > 0 else 0), pos


def _skip_tags(buf: bytes, pos: int, end: int) -> int:
    """The position after tagged fields at buf[pos], each skipped by its length (past `end` when
    they run past it, or number more than MAX_TAGS: refused before they are walked)."""
    if pos < end and buf[pos] == 0:
        return pos + 1
    count, pos = _uvarint(buf, pos, end)
    if count > MAX_TAGS:
        return end + 1
    for _i in range(count if count > 0 else 0):
        _tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        if size < 0 or pos > end:
            return end + 1
        pos += size
    return pos


def usual_throttle_offset(buf: bytes, length: int, pos: int, version: int) -> int:
    """The offset of throttle_time_ms in the usual shape, from the body at `pos` of buf[:length]; -1
    for any other shape (the full walk then handles it, errors included): never a wrong offset."""
    if pos < 0 or pos >= length:
        return -1
    topics = buf[pos] - 1
    pos += 1
    if topics < 0 or topics >= 0x7F:
        return -1
    for _t in range(topics):
        if version >= TOPIC_ID_FROM:
            pos += 16
        else:
            if pos >= length:
                return -1
            name = buf[pos]  # compact string: length + 1, one byte
            if name == 0 or name >= 0x80:
                return -1
            pos += name
        if pos >= length:
            return -1
        partitions = buf[pos] - 1
        pos += 1
        if partitions < 0 or partitions >= 0x7F:
            return -1
        for _p in range(partitions):
            pos += PARTITION_BYTES
            if pos + 1 >= length:
                return -1
            message = buf[pos + 1]  # after an empty record_errors (one byte: 1)
            if buf[pos] != 1 or message >= 0x80:
                return -1
            pos += 2 + (message - 1 if message > 1 else 0)
            if pos >= length or buf[pos] != 0:  # the partition's tagged fields
                return -1
            pos += 1
        if pos >= length or buf[pos] != 0:  # the topic's tagged fields
            return -1
        pos += 1
    return pos if pos + 4 <= length else -1


def usual_flexible_throttle_offset(frame: bytes | memoryview, pos: int, version: int) -> int | None:
    """usual_throttle_offset of a whole frame: the offset, or None for any other shape."""
    data = frame if type(frame) is bytes else bytes(frame)
    offset = usual_throttle_offset(data, len(data), pos, version)
    return None if offset < 0 else offset
