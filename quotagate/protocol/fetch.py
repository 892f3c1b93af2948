"""Fetch peeks: the longest time a fetch may wait at the broker for data (its long poll)."""

from __future__ import annotations

from struct import unpack_from

from quotagate.protocol.framing import FrameError

# Up to v14 the body starts with replica_id; from v15 that moved into a tagged field (which sits
# at the end), so max_wait_ms comes first.
REPLICA_ID_IN_BODY_UNTIL = 14


def max_wait_offset(body_offset: int, version: int) -> int:
    """Where a Fetch request's max_wait_ms lies."""
    return body_offset + (4 if version <= REPLICA_ID_IN_BODY_UNTIL else 0)


def fetch_max_wait_ms(frame: memoryview, body_offset: int, version: int) -> int:
    offset = max_wait_offset(body_offset, version)
    if offset + 4 > len(frame):
        raise FrameError("fetch request too short to hold max_wait_ms")
    return max(unpack_from(">i", frame, offset)[0], 0)
