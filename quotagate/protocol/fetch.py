"""Fetch: where a request's fields lie, and the few changes the proxy makes to a fetch without
decoding it (never its topics or records).

- A request's fixed fields all follow max_wait_ms at fixed distances, in every version the proxy
  passes (flexible versions encode int fields as they are): min_bytes, max_bytes (v3+),
  isolation_level (v4+), session_id and session_epoch (v7+, KIP-227).
- The session core (proxy/session_core.py, compiled) writes a lowered max_bytes (a consumer_byte_rate's
  cap, KAFKA-9677) into a copy of the frame, and max_wait_ms and min_bytes 0 for a fetch whose answer
  will be replaced (below), at these offsets.
- `throttled_fetch_response`: what the broker answers a fetch that arrives while its client is
  throttled (KIP-219, FetchContext.getThrottledResponse): no data, error NONE, session id 0 for a
  full or sessionless fetch; `throttled_fetch_replacement` makes the same from the broker's answer
  to an incremental fetch, keeping its error and session id. throttle_time_ms is left 0 in both:
  the session core writes the throttle into every response it sends (protocol/throttle.py).
"""

from __future__ import annotations

from struct import pack, unpack_from

from quotagate.protocol.api_keys import ApiKey
from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError
from quotagate.protocol.headers import response_body_offset

API_FETCH = int(ApiKey.FETCH)
# Up to v14 the body starts with replica_id; from v15 that moved into a tagged field (which sits
# at the end), so max_wait_ms comes first.
REPLICA_ID_IN_BODY_UNTIL = 14
MAX_BYTES_FROM = 3  # the request's max_bytes (before it, only each partition's)
SESSIONS_FROM = 7  # KIP-227 fetch sessions: session_id and session_epoch; the response's error_code
FLEXIBLE_FROM = 12  # compact arrays and tagged fields, in the response header too
# Distances from max_wait_ms.
MIN_BYTES_AFTER = 4
MAX_BYTES_AFTER = 8
SESSION_EPOCH_AFTER = 17  # after min_bytes, max_bytes, isolation_level (int8) and session_id


def max_wait_offset(body_offset: int, version: int) -> int:
    """Where a Fetch request's max_wait_ms lies."""
    return body_offset + (4 if version <= REPLICA_ID_IN_BODY_UNTIL else 0)


def throttled_fetch_response(correlation_id: int, version: int, error_code: int = 0, session_id: int = 0) -> bytes:
    """A fetch response with no topics (a frame, size prefix included), throttle_time_ms 0."""
    flexible = version >= FLEXIBLE_FROM
    header = pack(">i", correlation_id) + (b"\x00" if flexible else b"")
    body = b"" if version < 1 else pack(">i", 0)  # throttle_time_ms (v1+)
    if version >= SESSIONS_FROM:
        body += pack(">hi", error_code, session_id)
    body += b"\x01\x00" if flexible else pack(">i", 0)  # no topics (compact: count + 1), and no tags
    return pack(">i", len(header) + len(body)) + header + body


def throttled_fetch_replacement(frame: bytes | memoryview, version: int) -> bytes:
    """The broker's answer to an incremental fetch (v7+), emptied as the broker empties a throttled
    one (IncrementalFetchContext.getThrottledResponse): its correlation id, error and session id,
    no topics. The broker's session took the request and moved to its next epoch, as the client's
    does when it reads this answer, so the two stay in step."""
    view = memoryview(frame)
    at = response_body_offset(view, API_FETCH, version)
    if len(view) < at + 10 or version < SESSIONS_FROM:
        raise FrameError(f"fetch response v{version} too short to hold its session id")
    correlation_id = unpack_from(">i", view, FRAME_SIZE_BYTES)[0]
    error_code, session_id = unpack_from(">hi", view, at + 4)
    return throttled_fetch_response(correlation_id, version, error_code, session_id)
