"""Produce peeks: a request's acks, and where a response's throttle_time_ms and top-level tags sit.

A produce response ends with throttle_time_ms (v1+) and, in flexible versions, top-level tagged
fields (KIP-951 NodeEndpoints, tag 0). Both sit behind the per-partition results, so finding them
means skipping over those results; this walks them with `struct` without building any objects.
"""

from __future__ import annotations

from struct import unpack_from

from quotagate.protocol.framing import FrameError
from quotagate.protocol.headers import read_uvarint, skip_tagged_fields

FLEXIBLE_FROM = 9
TOPIC_ID_FROM = 13


def _skip_string(buf: memoryview, pos: int, flexible: bool) -> int:
    """Skips a (nullable) string: int16 length, or in flexible versions uvarint length + 1."""
    if flexible:
        length_plus_one, pos = read_uvarint(buf, pos)
        return pos + max(length_plus_one - 1, 0)
    (length,) = unpack_from(">h", buf, pos)
    return pos + 2 + max(length, 0)


def _read_count(buf: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        count_plus_one, pos = read_uvarint(buf, pos)
        return max(count_plus_one - 1, 0), pos
    (count,) = unpack_from(">i", buf, pos)
    return max(count, 0), pos + 4


def produce_request_acks(frame: memoryview, body_offset: int, version: int) -> int:
    """The acks of a produce request (0 means the broker sends no response)."""
    pos = body_offset
    if version >= 3:  # transactional_id comes first
        pos = _skip_string(frame, pos, version >= FLEXIBLE_FROM)
    try:
        return unpack_from(">h", frame, pos)[0]
    except Exception as exc:  # struct.error
        raise FrameError("produce request too short to hold acks") from exc


def produce_response_throttle_offset(frame: memoryview, body_offset: int, version: int) -> int:
    """Offset of throttle_time_ms in a produce response (v1+); raises FrameError if truncated."""
    flexible = version >= FLEXIBLE_FROM
    # index, error_code, base_offset; log_append_time_ms from v2; log_start_offset from v5
    fixed_partition_bytes = 14 + (8 if version >= 2 else 0) + (8 if version >= 5 else 0)
    try:
        topics, pos = _read_count(frame, body_offset, flexible)
        for _ in range(topics):
            pos = pos + 16 if version >= TOPIC_ID_FROM else _skip_string(frame, pos, flexible)
            partitions, pos = _read_count(frame, pos, flexible)
            for _ in range(partitions):
                pos += fixed_partition_bytes
                if version >= 8:
                    record_errors, pos = _read_count(frame, pos, flexible)
                    for _ in range(record_errors):
                        pos = _skip_string(frame, pos + 4, flexible)
                        if flexible:
                            pos = skip_tagged_fields(frame, pos)
                    pos = _skip_string(frame, pos, flexible)
                if flexible:
                    pos = skip_tagged_fields(frame, pos)
            if flexible:
                pos = skip_tagged_fields(frame, pos)
    except FrameError:
        raise
    except Exception as exc:  # struct.error, IndexError on truncated input
        raise FrameError("truncated produce response") from exc
    if pos + 4 > len(frame):
        raise FrameError("truncated produce response")
    return pos


def produce_response_has_top_level_tags(frame: memoryview, body_offset: int, version: int) -> bool:
    """Whether a flexible produce response carries top-level tagged fields (e.g. NodeEndpoints)."""
    if version < FLEXIBLE_FROM:
        return False
    pos = produce_response_throttle_offset(frame, body_offset, version) + 4
    if pos >= len(frame):
        raise FrameError("truncated produce response")
    return frame[pos] != 0
