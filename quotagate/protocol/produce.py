"""Produce peeks: a request's acks, and where a response's throttle_time_ms and top-level tags sit.

A produce response ends with throttle_time_ms (v1+) and, in flexible versions, top-level tagged
fields (KIP-951 NodeEndpoints, tag 0). Both sit behind the per-partition results, whose number the
client's request chooses: the usual shape is read by produce_walk's shortcut, any other walked in C
by the response's schema (response_walk), never decoded.
"""

from __future__ import annotations

from array import array
from functools import cache
from struct import pack, unpack_from
from typing import NamedTuple

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from quotagate import compiled
from quotagate.protocol.apis import ApiKey
from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError, frame_errors
from quotagate.protocol.headers import encode_count, encode_string, read_count, read_uvarint
from quotagate.protocol.limits import DECODED_ELEMENTS_KEY, NO_LIMIT, tagged_fields_problem

_walk = compiled.load("quotagate.protocol.produce_walk")
_wire = compiled.load("quotagate.protocol.wire_walk")
ElementsOverLimit = _wire.ElementsOverLimit
_responses = compiled.load("quotagate.protocol.response_walk")
usual_flexible_throttle_offset = _walk.usual_flexible_throttle_offset

TRANSACTIONAL_ID_FROM = _walk.PRODUCE_TRANSACTIONAL_ID_FROM
FLEXIBLE_FROM = 9
TOPIC_ID_FROM = _walk.PRODUCE_TOPIC_ID_FROM
NODE_ENDPOINTS_TAG = 0
# The highest version whose request the walks here read and whose response the class decodes (version_caps.py).
READABLE_UP_TO: dict[int, int] = {ApiKey.PRODUCE: min(ProduceRequest.max_version, ProduceResponse.max_version)}


def _node_endpoints_schema() -> dict:
    """NodeEndpoints as a message of its own (the tagged field's bytes are its array), from the
    response's schema: what response_walk walks inside the tag."""
    schema = ProduceResponse._json  # type: ignore[attr-defined]
    field = next(f for f in schema["fields"] if f["name"] == "NodeEndpoints")
    untagged = {key: value for key, value in field.items() if key not in ("tag", "taggedVersions")}
    return {"flexibleVersions": schema["flexibleVersions"], "fields": [untagged]}


_NODE_ENDPOINTS_SCHEMA = _node_endpoints_schema()


def produce_response_throttle_offset(frame: memoryview, body_offset: int, version: int) -> int:
    """Offset of throttle_time_ms in a produce response (v1+); raises FrameError if truncated."""
    if version >= FLEXIBLE_FROM:
        usual = usual_flexible_throttle_offset(frame, body_offset, version)
        if usual is not None:
            return usual
    return _walked_throttle_offset(frame, body_offset, version)


def _walked_throttle_offset(frame: memoryview, body_offset: int, version: int) -> int:
    prog = _wire.program(ProduceResponse, version)
    at = prog.ops_at.get("ThrottleTimeMs")
    if at is None:
        raise FrameError(f"a Produce response v{version} has no throttle_time_ms")
    pos = _responses.fields_end(prog, frame, body_offset, 0, at)
    if pos + 4 > len(frame):
        raise FrameError("truncated produce response")
    return pos


def _top_level_tags_offset(frame: memoryview, body_offset: int, version: int) -> int:
    """Where a flexible produce response's top-level tagged fields start (FrameError if it has none)."""
    usual = usual_flexible_throttle_offset(frame, body_offset, version)
    if usual is not None:
        pos = usual + 4
    else:
        prog = _wire.program(ProduceResponse, version)
        pos = _responses.fields_end(prog, frame, body_offset, 0, prog.top)
    if pos >= len(frame):
        raise FrameError("truncated produce response")
    return pos


def produce_response_has_top_level_tags(frame: memoryview, body_offset: int, version: int) -> bool:
    """Whether a flexible produce response carries top-level tagged fields (e.g. NodeEndpoints)."""
    if version < FLEXIBLE_FROM:
        return False
    return frame[_top_level_tags_offset(frame, body_offset, version)] != 0


class NodeEndpointsEdits(NamedTuple):
    """Where a produce response's NodeEndpoints name brokers (response_walk.address_edits), and the
    tagged field's size, which changes with them: (where its varint starts, where it ends, its value)."""

    addresses: list[tuple[int, bytes, int]]
    edits: array  # (start, end, address index) triples
    size_start: int
    size_end: int
    size: int


@frame_errors("Produce response")
def node_endpoints_edits(frame: memoryview, body_offset: int, version: int) -> NodeEndpointsEdits | None:
    """The brokers a produce response's NodeEndpoints (KIP-951, top-level tag 0) name, or None when it
    has no top-level tagged fields (nearly every response). The partitions before them are walked in
    C; the tags are read by their sizes, at most MAX_TAGGED_FIELDS of them, and must end the frame."""
    if version < FLEXIBLE_FROM:
        return None
    pos = _top_level_tags_offset(frame, body_offset, version)
    if frame[pos] == 0:
        return None
    count, pos = read_uvarint(frame, pos)
    problem = tagged_fields_problem("a produce response's top-level tagged fields", count)
    if problem is not None:
        raise FrameError(problem)
    found = None
    for _ in range(count):
        tag, size_start = read_uvarint(frame, pos)
        size, pos = read_uvarint(frame, size_start)
        end = pos + size
        if end > len(frame):
            raise FrameError("a produce response's tagged field runs past its end")
        if tag == NODE_ENDPOINTS_TAG and found is None:
            prog = _wire.schema_program("ProduceResponse.NodeEndpoints", _NODE_ENDPOINTS_SCHEMA, version)
            ops_at = prog.ops_at
            addresses, edits, _start, array_end, _after = _responses.address_edits(
                prog, frame, pos, ops_at["NodeEndpoints"], ops_at["NodeEndpoints.NodeId"], -1, False
            )
            if array_end != end:
                raise FrameError("a produce response's NodeEndpoints do not fill their tagged field")
            found = NodeEndpointsEdits(addresses, edits, size_start, pos, size)
        pos = end
    if pos != len(frame):
        raise FrameError("a produce response does not end with its tagged fields")
    return found


class ProduceTopic(NamedTuple):
    name: str
    start: int  # offset of the topic's entry in the frame
    end: int
    partitions_at: int  # offset of its partition array (the count)
    record_bytes: int  # size of its record batches


class ProduceRequestLayout(NamedTuple):
    topics_offset: int  # where the topic array (its count) starts
    topics_end: int  # where it ends: what follows are the top-level tagged fields (flexible)
    topics: tuple[ProduceTopic, ...]


def produce_request_layout(
    frame: memoryview, body_offset: int, version: int, max_topics: int = NO_LIMIT
) -> ProduceRequestLayout:
    """Where each topic of a produce request sits, without touching the record batches (or message
    sets) or reading a partition (produce_walk, in C). A client sizes it: a request of more than
    `max_topics` topics (the proxy's max_decoded_elements) is refused (ElementsOverLimit) before a
    name is decoded."""
    topics = _walk.produce_topics_of(frame, body_offset, len(frame), version, False)
    if topics is None:
        raise FrameError("truncated produce request")
    if 0 <= max_topics < len(topics):
        raise ElementsOverLimit(
            f"a produce request of {len(topics)} topics: more than {max_topics} (proxy.{DECODED_ELEMENTS_KEY})"
        )
    pos = _walk.topics_start_of(frame, body_offset, version)
    return ProduceRequestLayout(
        pos,
        topics[-1][2] if topics else read_count(frame, pos, version >= FLEXIBLE_FROM)[1],
        tuple([ProduceTopic(str(name, "utf-8", "replace"), *rest) for name, *rest in topics]),
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


@cache
def _partition_refusal_fields(version: int, error_code: int) -> bytes:
    """A refused partition's result after its index and before its error message (v8+; its end
    below v8): kafka-python's encoding of one refused partition, once per version and error."""
    topic_cls = ProduceResponse.TopicProduceResponse
    extra = {"record_errors": [], "error_message": None} if version >= 8 else {}
    partition = topic_cls.PartitionProduceResponse(
        version=version, index=0, error_code=error_code, base_offset=-1, log_start_offset=-1, **extra
    )
    body = bytes(
        ProduceResponse(
            version=version,
            responses=[topic_cls(version=version, name="", partition_responses=[partition])],
            throttle_time_ms=0,
        ).encode()
    )
    flexible = version >= FLEXIBLE_FROM
    head = len(encode_count(1, flexible)) * 2 + len(encode_string("", flexible))  # topics, name, partitions
    tail = (1 if flexible else 0) + (4 if version >= 1 else 0) + (1 if flexible else 0)  # tags, throttle, tags
    entry = body[head : len(body) - tail]
    if flexible:
        entry = entry[:-1]  # the partition's tagged fields
    if version >= 8:
        entry = entry[: -len(encode_string(None, flexible))]  # the null error message
    return entry[4:]  # after the index


@frame_errors("Produce request")
def refused_topic_entry(
    frame: memoryview | bytes, version: int, topic: ProduceTopic, error_code: int, message: str
) -> bytes:
    """A topic's entry in a produce response that refuses each of its partitions with `error_code` and
    `message`: its name and each partition's index as the request sent them (wire_walk's echo, in C,
    whatever the number of partitions), the other fields as kafka-python encodes them."""
    flexible = version >= FLEXIBLE_FROM
    fields = _partition_refusal_fields(version, error_code)
    if version >= 8:
        fields += encode_string(message, flexible)
    if flexible:
        fields += b"\x00"  # the partition's tagged fields
    prog = _wire.program(ProduceRequest, version)
    array_at = prog.ops_at["TopicData.PartitionData"]
    walk = _wire.Walk(prog, frame)
    partitions, count, _end = walk.echo(
        topic.partitions_at, array_at, prog.ops_at["TopicData.PartitionData.Index"], b"", fields
    )
    name = bytes(frame[topic.start : topic.partitions_at])
    return b"".join((name, encode_count(count, flexible), partitions, b"\x00" if flexible else b""))


@frame_errors("Produce response")
def produce_response_with_refusals(
    frame: memoryview | bytes, version: int, order: tuple[str, ...], refused: dict[str, bytes]
) -> bytes:
    """Merges the refused topics' entries (refused_topic_entry's) into the broker's produce response,
    in the request's topic order; each of the broker's entries copied as it came (walked in C)."""
    view = memoryview(frame)
    prog = _wire.program(ProduceResponse, version)
    ops_at = prog.ops_at
    body = FRAME_SIZE_BYTES + 4 + (1 if version >= FLEXIBLE_FROM else 0)
    spans, start, end = _responses.entry_spans(prog, view, body, ops_at["Responses"], (ops_at["Responses.Name"],))
    names = _responses.field_values(view, spans, 3, 0, _responses.VALUE_STRING, prog.flexible)
    entries: dict[str, bytes | memoryview] = {
        str(name or b"", "utf-8", "replace"): view[spans[i * 3] : spans[i * 3 + 1]] for i, name in enumerate(names)
    }
    entries.update(refused)
    ordered = [entries[name] for name in order if name in entries] + [
        entry for name, entry in entries.items() if name not in order
    ]
    responses = encode_count(len(ordered), prog.flexible) + b"".join(ordered)
    return _responses.splice(view, array("q", (start, end, 0)), [responses], True)


def produce_refusal_response(correlation_id: int, version: int, refused: list[bytes]) -> bytes:
    """A whole produce response, made by the proxy, of the refused topics' entries (refused_topic_entry's)."""
    flexible = version >= FLEXIBLE_FROM
    header = pack(">i", correlation_id) + (b"\x00" if flexible else b"")
    throttle = pack(">i", 0) if version >= 1 else b""
    body = b"".join((encode_count(len(refused), flexible), *refused, throttle, b"\x00" if flexible else b""))
    return pack(">i", len(header) + len(body)) + header + body
