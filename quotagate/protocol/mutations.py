"""CreateTopics, CreatePartitions and DeleteTopics: the topic-mutation requests the controller
mutation quota (KIP-599) meters.

The proxy admits the topics of one request in order; what it refuses is cut out of the request it
forwards and answered by the proxy with THROTTLING_QUOTA_EXCEEDED, merged into the broker's
response in the client's original order. A client sizes these messages (and a CreateTopics
response carries every created topic's configs), so none is decoded: the request and the response
are walked in C by their schemas (response_walk.entry_spans, with Kafka's limits and within
max_decoded_elements for the request), a topic's name, id and partition count read where they
stand, and what goes on is made by copying each kept entry's bytes. A refused topic's answer is its
name (and id) as the client sent it followed by the refusal's other fields, which kafka-python
encodes once per API version.
"""

from __future__ import annotations

import uuid
from array import array
from dataclasses import dataclass
from functools import cache
from struct import pack
from typing import Any, NamedTuple

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from quotagate import compiled
from quotagate.protocol.apis import ApiKey, is_flexible
from quotagate.protocol.framing import FrameError, frame_errors
from quotagate.protocol.headers import encode_count, response_body_offset
from quotagate.protocol.limits import DECODED_ELEMENTS_KEY, NO_LIMIT
from quotagate.protocol.throttle import THROTTLE_MAX_MS

_wire = compiled.load("quotagate.protocol.wire_walk")
_responses = compiled.load("quotagate.protocol.response_walk")
THROTTLING_QUOTA_EXCEEDED = 89
QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."  # Kafka's own wording
# Versions from which a client understands per-topic refusals (KIP-599 strict mode); below them
# the proxy admits everything, charges it and throttles (permissive mode).
STRICT_FROM = {ApiKey.CREATE_TOPICS: 6, ApiKey.DELETE_TOPICS: 5, ApiKey.CREATE_PARTITIONS: 3}

_REQUESTS: dict[int, Any] = {
    ApiKey.CREATE_TOPICS: CreateTopicsRequest,
    ApiKey.DELETE_TOPICS: DeleteTopicsRequest,
    ApiKey.CREATE_PARTITIONS: CreatePartitionsRequest,
}
_RESPONSES: dict[int, Any] = {
    ApiKey.CREATE_TOPICS: CreateTopicsResponse,
    ApiKey.DELETE_TOPICS: DeleteTopicsResponse,
    ApiKey.CREATE_PARTITIONS: CreatePartitionsResponse,
}
# The highest version of each API whose request and response the classes above read (version_caps.py).
READABLE_UP_TO: dict[int, int] = {
    key: min(_REQUESTS[key].max_version, _RESPONSES[key].max_version) for key in _REQUESTS
}
# The array of topics in each request, and of results in each response (DeleteTopics below v6: its
# topics are an array of names).
_REQUEST_TOPICS = {ApiKey.CREATE_TOPICS: "Topics", ApiKey.DELETE_TOPICS: "Topics", ApiKey.CREATE_PARTITIONS: "Topics"}
_RESULTS = {ApiKey.CREATE_TOPICS: "Topics", ApiKey.DELETE_TOPICS: "Responses", ApiKey.CREATE_PARTITIONS: "Results"}
NO_FIELD = -1
_NO_TOPIC_ID = bytes(16)


class MutationTopic(NamedTuple):  # one per topic of a request a client sizes: a tuple, made in C
    name: str | None
    topic_id: Any  # DeleteTopics v6+ may name a topic by id only
    # CreateTopics: partitions asked for (−1: the broker's default); CreatePartitions: the new
    # total count; DeleteTopics: unused (the proxy looks the current count up).
    requested: int


@dataclass(slots=True)
class MutationRequest:
    api_key: int
    version: int
    frame: memoryview | bytes  # the request as sent
    topics: list[MutationTopic]
    validate_only: bool
    # Where the topic array (its count) starts and ends, and each topic's entry: (start, end) pairs.
    topics_start: int
    topics_end: int
    entries: list[tuple[int, int]]
    # What of each topic a refusal echoes: its name (and its id, DeleteTopics v6+), as (start, end).
    echoed: list[tuple[int, int]]

    @property
    def strict(self) -> bool:
        return self.version >= STRICT_FROM[self.api_key]

    @property
    def flexible(self) -> bool:
        return is_flexible(self.api_key, self.version)

    @frame_errors("topic mutation request")
    def encode_keeping(self, indexes: list[int]) -> bytes:
        """The request as a frame with only the topics at `indexes`, in their order: their entries'
        bytes as sent."""
        frame, entries = self.frame, self.entries
        kept = b"".join([frame[entries[i][0] : entries[i][1]] for i in indexes])
        topics = encode_count(len(indexes), self.flexible) + kept
        return _responses.splice(frame, _one_edit(self.topics_start, self.topics_end), [topics], True)

    def refusal_entry(self, index: int) -> bytes:
        """The answer to topic `index` refused: its name (and id) as sent, then the refusal's fields."""
        start, end = self.echoed[index]
        return bytes(self.frame[start:end]) + _refusal_fields(self.api_key, self.version)


def _one_edit(start: int, end: int) -> array:
    """response_walk.splice's edit replacing bytes [start, end) with the first replacement."""
    return array("q", (start, end, 0))


def _field_at(ops_at: dict[str, int], path: str) -> int:
    return ops_at.get(path, NO_FIELD)


@frame_errors("topic mutation request")
def decode_mutation(
    frame: memoryview, body_offset: int, api_key: int, version: int, max_elements: int = NO_LIMIT
) -> MutationRequest:
    """A topic mutation, checked whole as Kafka parses it first (wire_walk: Kafka's limits), within
    `max_elements` array elements (ElementsOverLimit names max_decoded_elements), and read where it
    stands: each topic's name, id and partition count, never a kafka-python object."""
    cls = _REQUESTS[api_key]
    _wire.check(cls, version, frame, body_offset, max_elements, f"proxy.{DECODED_ELEMENTS_KEY}")
    prog = _wire.program(cls, version)
    ops_at = prog.ops_at
    flexible = prog.flexible
    names_only = api_key == ApiKey.DELETE_TOPICS and version < 6
    array_name = "TopicNames" if names_only else _REQUEST_TOPICS[api_key]
    array_at = ops_at[array_name]
    wanted = (
        _field_at(ops_at, f"{array_name}.Name"),
        _field_at(ops_at, f"{array_name}.TopicId"),
        _field_at(ops_at, f"{array_name}.NumPartitions"),
        _field_at(ops_at, f"{array_name}.Count"),
        _field_at(ops_at, f"{array_name}.Assignments"),
    )
    spans, topics_start, topics_end = _responses.entry_spans(prog, frame, body_offset, array_at, wanted)
    stride = 2 + len(wanted)
    names = _responses.field_values(frame, spans, stride, 0, _responses.VALUE_STRING, flexible)
    ids = _responses.field_values(frame, spans, stride, 1, _responses.VALUE_UUID, flexible)
    if api_key == ApiKey.CREATE_TOPICS:
        asked = _responses.field_values(frame, spans, stride, 2, _responses.VALUE_INT32, flexible)
        assigned = _responses.field_values(frame, spans, stride, 4, _responses.VALUE_COUNT, flexible)
        # A count of 0 or less asks for the broker's default (-1), unless partitions are assigned.
        requested = [n if n > 0 else (a or -1) for n, a in zip(asked, assigned, strict=True)]
    elif api_key == ApiKey.CREATE_PARTITIONS:
        requested = _responses.field_values(frame, spans, stride, 3, _responses.VALUE_INT32, flexible)
    else:
        requested = [0] * len(names)
    topics = [
        MutationTopic(
            None if name is None else str(name, "utf-8", "replace"),
            None if topic_id is None or topic_id == _NO_TOPIC_ID else uuid.UUID(bytes=topic_id),
            partitions,
        )
        for name, topic_id, partitions in zip(names, ids, requested, strict=True)
    ]
    starts = range(0, len(spans), stride)
    entries = [(spans[i], spans[i + 1]) for i in starts]
    # A refusal echoes the topic's name, and its id (DeleteTopics v6+), which come first in an entry.
    if names_only:
        echoed = [(spans[i + 2], spans[i + 1]) for i in starts]
    elif api_key == ApiKey.DELETE_TOPICS:
        echoed = [(spans[i + 2], spans[i + 3] + 16) for i in starts]
    else:  # up to the partition count that follows the name
        after = 2 + (2 if api_key == ApiKey.CREATE_TOPICS else 3)
        echoed = [(spans[i + 2], spans[i + after]) for i in starts]
    validate_at = next((at for path, at in ops_at.items() if path.lower() == "validateonly"), NO_FIELD)
    validate_only = False
    if validate_at != NO_FIELD:
        at = _responses.fields_end(prog, frame, topics_end, prog.following(array_at), validate_at)
        validate_only = frame[at] != 0
    return MutationRequest(api_key, version, frame, topics, validate_only, topics_start, topics_end, entries, echoed)


def _refusal(api_key: int, version: int, name: str | None, topic_id: Any = None) -> Any:
    """A refused topic's result entry, as kafka-python makes it."""
    if api_key == ApiKey.CREATE_TOPICS:
        return CreateTopicsResponse.CreatableTopicResult(
            version=version,
            name=name,
            error_code=THROTTLING_QUOTA_EXCEEDED,
            error_message=QUOTA_EXCEEDED_MESSAGE,
            num_partitions=-1,
            replication_factor=-1,
            configs=[],
        )
    if api_key == ApiKey.CREATE_PARTITIONS:
        return CreatePartitionsResponse.CreatePartitionsTopicResult(
            version=version, name=name, error_code=THROTTLING_QUOTA_EXCEEDED, error_message=QUOTA_EXCEEDED_MESSAGE
        )
    fields = {"topic_id": topic_id} if version >= 6 and topic_id is not None else {}
    return DeleteTopicsResponse.DeletableTopicResult(
        version=version,
        name=name,
        error_code=THROTTLING_QUOTA_EXCEEDED,
        error_message=QUOTA_EXCEEDED_MESSAGE,
        **fields,
    )


def _results_field(api_key: int) -> str:
    return {ApiKey.CREATE_TOPICS: "topics", ApiKey.DELETE_TOPICS: "responses", ApiKey.CREATE_PARTITIONS: "results"}[
        api_key
    ]


@cache
def _refusal_fields(api_key: int, version: int) -> bytes:
    """What follows the name (and, DeleteTopics v6+, the id) in a refused topic's result entry:
    kafka-python's encoding of one refusal, once per API version, cut after them."""
    flexible = is_flexible(api_key, version)
    topic_id = uuid.UUID(int=1) if api_key == ApiKey.DELETE_TOPICS and version >= 6 else None
    response = _RESPONSES[api_key](version=version, throttle_time_ms=0)
    setattr(response, _results_field(api_key), [_refusal(api_key, version, "", topic_id)])
    body = bytes(response.encode())
    head = 4 + len(encode_count(1, flexible))  # throttle_time_ms, the count
    entry = body[head : len(body) - (1 if flexible else 0)]  # the response's tagged fields
    skip = 1 if flexible else 2  # the empty name
    if topic_id is not None:
        skip += 16
    return entry[skip:]


def refusal_response(request: MutationRequest, correlation_id: int, refused: list[int], throttle_ms: int) -> bytes:
    """A whole response made by the proxy: every topic at `refused` gets THROTTLING_QUOTA_EXCEEDED."""
    flexible = request.flexible
    header = pack(">i", correlation_id) + (b"\x00" if flexible else b"")
    body = b"".join(
        [
            pack(">i", min(throttle_ms, THROTTLE_MAX_MS)),  # throttle_time_ms: first in every version
            encode_count(len(refused), flexible),
            *[request.refusal_entry(i) for i in refused],
            b"\x00" if flexible else b"",
        ]
    )
    return pack(">i", len(header) + len(body)) + header + body


class TopicResult(NamedTuple):
    name: str | None
    error_code: int
    num_partitions: int  # CreateTopics v5+: the partitions created; −1 when unknown


@dataclass(frozen=True, slots=True)
class MutationResults:
    """Where a mutation response's results stand: its result array (its count) from `start` to `end`,
    and each result's (start, end)."""

    start: int
    end: int
    entries: list[tuple[int, int]]


@frame_errors("topic mutation response")
def decode_results(frame: memoryview | bytes, api_key: int, version: int) -> tuple[MutationResults, list[TopicResult]]:
    """Each result's name, error code and (CreateTopics v5+) partition count, read where they stand;
    the rest (a created topic's configs among it) is walked in C, never decoded."""
    view = memoryview(frame)
    prog = _wire.program(_RESPONSES[api_key], version)
    ops_at = prog.ops_at
    array_name = _RESULTS[api_key]
    wanted = (
        ops_at[f"{array_name}.Name"],
        ops_at[f"{array_name}.ErrorCode"],
        _field_at(ops_at, f"{array_name}.NumPartitions"),
    )
    body = response_body_offset(view, api_key, version)
    spans, start, end = _responses.entry_spans(prog, view, body, ops_at[array_name], wanted)
    names = _responses.field_values(view, spans, 5, 0, _responses.VALUE_STRING, prog.flexible)
    errors = _responses.field_values(view, spans, 5, 1, _responses.VALUE_INT16, prog.flexible)
    partitions = _responses.field_values(view, spans, 5, 2, _responses.VALUE_INT32, prog.flexible)
    results = [
        TopicResult(None if name is None else str(name, "utf-8", "replace"), error_code, -1 if count is None else count)
        for name, error_code, count in zip(names, errors, partitions, strict=True)
    ]
    entries = [(spans[i], spans[i + 1]) for i in range(0, len(spans), 5)]
    return MutationResults(start, end, entries), results


@frame_errors("topic mutation response")
def merge_refusals(
    frame: memoryview | bytes,
    request: MutationRequest,
    forwarded: list[int],
    refused: list[int],
    response: MutationResults,
) -> bytes:
    """The broker's response for the `forwarded` topics with the `refused` ones merged back in, all
    in the order the client sent them: each result's bytes as the broker sent them."""
    view = memoryview(frame)
    if len(response.entries) != len(forwarded):
        raise FrameError(f"broker answered {len(response.entries)} topics for the {len(forwarded)} forwarded")
    by_index: dict[int, bytes | memoryview] = {
        index: view[start:end] for index, (start, end) in zip(forwarded, response.entries, strict=True)
    }
    by_index.update({index: request.refusal_entry(index) for index in refused})
    results = encode_count(len(by_index), request.flexible) + b"".join([by_index[i] for i in sorted(by_index)])
    return _responses.splice(view, _one_edit(response.start, response.end), [results], True)
