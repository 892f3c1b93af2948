"""Produce peeks: a request's acks, and where a response's throttle_time_ms and top-level tags sit.

A produce response ends with throttle_time_ms (v1+) and, in flexible versions, top-level tagged
fields (KIP-951 NodeEndpoints, tag 0). Both sit behind the per-partition results, so finding them
means skipping over those results; this walks them with `struct` without building any objects.
"""

from __future__ import annotations

from struct import pack, unpack_from
from typing import NamedTuple

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from quotagate import compiled
from quotagate.protocol.apis import ApiKey
from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError, frame_errors
from quotagate.protocol.headers import encode_count, read_count, skip_string, skip_tagged_fields

_walk = compiled.load("quotagate.protocol.produce_walk")
usual_flexible_throttle_offset = _walk.usual_flexible_throttle_offset

TRANSACTIONAL_ID_FROM = 3  # as produce_walk's (its C constants are not Python's to import)
FLEXIBLE_FROM = 9
TOPIC_ID_FROM = 13
# The highest version whose request the walks here read and whose response the class decodes (version_caps.py).
READABLE_UP_TO: dict[int, int] = {ApiKey.PRODUCE: min(ProduceRequest.max_version, ProduceResponse.max_version)}


def produce_request_acks(frame: memoryview, body_offset: int, version: int) -> int:
    """The acks of a produce request (0 means the broker sends no response): produce_walk's walk."""
    acks = _walk.produce_acks(bytes(frame), body_offset, len(frame), version)
    if acks < -0x8000:
        raise FrameError("produce request too short to hold acks")
    return acks


def produce_response_throttle_offset(frame: memoryview, body_offset: int, version: int) -> int:
    """Offset of throttle_time_ms in a produce response (v1+); raises FrameError if truncated."""
    if version >= FLEXIBLE_FROM:
        usual = usual_flexible_throttle_offset(frame, body_offset, version)
        if usual is not None:
            return usual
    return _walked_throttle_offset(frame, body_offset, version)


def _walked_throttle_offset(frame: memoryview, body_offset: int, version: int) -> int:
    flexible = version >= FLEXIBLE_FROM
    # index, error_code, base_offset; log_append_time_ms from v2; log_start_offset from v5
    fixed_partition_bytes = 14 + (8 if version >= 2 else 0) + (8 if version >= 5 else 0)
    try:
        topics, pos = read_count(frame, body_offset, flexible)
        for _ in range(topics):
            pos = pos + 16 if version >= TOPIC_ID_FROM else skip_string(frame, pos, flexible)
            partitions, pos = read_count(frame, pos, flexible)
            # Below v8 the loop reads nothing: a huge count must not make it spin.
            if pos + partitions * fixed_partition_bytes > len(frame):
                raise FrameError("produce response announces more partitions than it holds")
            for _ in range(partitions):
                pos += fixed_partition_bytes
                if version >= 8:
                    record_errors, pos = read_count(frame, pos, flexible)
                    for _ in range(record_errors):
                        pos = skip_string(frame, pos + 4, flexible)
                        if flexible:
                            pos = skip_tagged_fields(frame, pos)
                    pos = skip_string(frame, pos, flexible)
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


class ProduceTopic(NamedTuple):
    name: str
    start: int  # offset of the topic's entry in the frame
    end: int
    partitions: tuple[int, ...]
    record_bytes: int  # size of its record batches


class ProduceRequestLayout(NamedTuple):
    topics_offset: int  # where the topic array (its count) starts
    topics_end: int  # where it ends: what follows are the top-level tagged fields (flexible)
    topics: tuple[ProduceTopic, ...]


def _topics_offset(frame: memoryview, body_offset: int, version: int) -> int:
    """Where a produce request's topic array starts: after transactional_id (v3+), acks and timeout_ms."""
    pos = skip_string(frame, body_offset, version >= FLEXIBLE_FROM) if version >= TRANSACTIONAL_ID_FROM else body_offset
    return pos + 2 + 4


def produce_request_layout(frame: memoryview, body_offset: int, version: int) -> ProduceRequestLayout:
    """Where each topic of a produce request sits, without touching the record batches (or message sets)."""
    topics = _walk.produce_topics_of(frame, body_offset, len(frame), version, False)
    if topics is None:
        raise FrameError("truncated produce request")
    pos = _topics_offset(frame, body_offset, version)
    return ProduceRequestLayout(
        pos,
        topics[-1][2] if topics else read_count(frame, pos, version >= FLEXIBLE_FROM)[1],
        tuple(ProduceTopic(str(name, "utf-8", "replace"), *rest) for name, *rest in topics),
    )


# RecordBatch v2: magic is at byte 16 of a batch, producerId (int64) at byte 43; the header is 61 bytes.
BATCH_MAGIC_AT = 16
BATCH_PRODUCER_ID_AT = 43
BATCH_HEADER_BYTES = 61
NO_PRODUCER_ID = -1


@frame_errors("Produce request")
def produce_producer_id(frame: memoryview, body_offset: int, version: int) -> int:
    """The producer ID of a produce request's first record batch, or -1 when it has none or is not
    idempotent. One producer sends one request, so its first batch speaks for all; only the lengths
    on the way are read (produce_walk, in C), never the records. Message sets (magic 0 and 1, all
    Produce v0-v2 carries) have no producer ID: -1, as the broker's ProducerIdQuotaManager sees them
    (it counts only batches with one)."""
    at = _walk.first_batch_of(frame, body_offset, len(frame), version, BATCH_HEADER_BYTES)
    if at == -2:
        raise FrameError("truncated produce request")
    if at < 0 or frame[at + BATCH_MAGIC_AT] != 2:
        return NO_PRODUCER_ID
    return int(unpack_from(">q", frame, at + BATCH_PRODUCER_ID_AT)[0])


def produce_request_keeping(
    frame: memoryview, version: int, layout: ProduceRequestLayout, keep: frozenset[str] | set[str]
) -> bytes:
    """The same produce request with only the topics in `keep`; record batches are copied as bytes."""
    kept = [frame[t.start : t.end] for t in layout.topics if t.name in keep]
    parts = [
        frame[FRAME_SIZE_BYTES : layout.topics_offset],
        encode_count(len(kept), version >= FLEXIBLE_FROM),
        *kept,
        frame[layout.topics_end :],
    ]
    size = sum(len(part) for part in parts)
    return b"".join([pack(">i", size), *parts])


def refusal_entries(version: int, refused: dict[str, tuple[int, ...]], error_code: int, message: str) -> list:
    """ProduceResponse topic entries answering every partition of the refused topics with an error."""
    topic_cls = ProduceResponse.TopicProduceResponse
    partition_cls = topic_cls.PartitionProduceResponse
    extra = {"record_errors": [], "error_message": message} if version >= 8 else {}
    return [
        topic_cls(
            version=version,
            name=name,
            partition_responses=[
                partition_cls(
                    version=version, index=p, error_code=error_code, base_offset=-1, log_start_offset=-1, **extra
                )
                for p in partitions
            ],
        )
        for name, partitions in refused.items()
    ]


@frame_errors("Produce response")
def produce_response_with_refusals(
    frame: memoryview | bytes,
    version: int,
    order: tuple[str, ...],
    refused: dict[str, tuple[int, ...]],
    error_code: int,
    message: str,
) -> bytes:
    """Merges refused topics into the broker's produce response, in the request's topic order."""
    view = memoryview(frame)
    header_end = FRAME_SIZE_BYTES + 4 + (1 if version >= FLEXIBLE_FROM else 0)
    try:
        response = ProduceResponse.decode(view[header_end:], version=version)
    except Exception as exc:
        raise FrameError(f"cannot decode ProduceResponse v{version}: {exc}") from exc
    entries = {entry.name: entry for entry in response.responses}
    entries.update({entry.name: entry for entry in refusal_entries(version, refused, error_code, message)})
    response.responses = [entries[name] for name in order if name in entries] + [
        entry for name, entry in entries.items() if name not in order
    ]
    body = bytes(response.encode())
    header = bytes(view[FRAME_SIZE_BYTES:header_end])
    return pack(">i", len(header) + len(body)) + header + body


def produce_refusal_response(
    correlation_id: int, version: int, refused: dict[str, tuple[int, ...]], error_code: int, message: str
) -> bytes:
    """A whole produce response, made by the proxy, refusing every partition of the request."""
    response = ProduceResponse(
        version=version, responses=refusal_entries(version, refused, error_code, message), throttle_time_ms=0
    )
    header = pack(">i", correlation_id) + (b"\x00" if version >= FLEXIBLE_FROM else b"")
    body = bytes(response.encode())
    return pack(">i", len(header) + len(body)) + header + body
