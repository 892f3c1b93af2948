"""CreateTopics, CreatePartitions and DeleteTopics: the topic-mutation requests the controller
mutation quota (KIP-599) meters, decoded and re-encoded with kafka-python's classes.

The proxy admits the topics of one request in order; what it refuses is cut out of the request it
forwards and answered by the proxy with THROTTLING_QUOTA_EXCEEDED, merged into the broker's
response in the client's original order. These requests are rare, so full decoding is fine here.
"""

from __future__ import annotations

from dataclasses import dataclass
from struct import pack
from typing import Any

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
from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError, frame_errors
from quotagate.protocol.headers import response_body_offset
from quotagate.protocol.limits import DECODED_ELEMENTS_KEY, NO_LIMIT
from quotagate.protocol.throttle import THROTTLE_MAX_MS

_wire = compiled.load("quotagate.protocol.wire_walk")
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


@dataclass(frozen=True, slots=True)
class MutationTopic:
    name: str | None
    topic_id: Any  # DeleteTopics v6+ may name a topic by id only
    # CreateTopics: partitions asked for (−1: the broker's default); CreatePartitions: the new
    # total count; DeleteTopics: unused (the proxy looks the current count up).
    requested: int


@dataclass(slots=True)
class MutationRequest:
    api_key: int
    version: int
    header: bytes  # the request header as sent (without the size prefix)
    message: Any  # the decoded kafka-python request
    topics: list[MutationTopic]
    validate_only: bool

    @property
    def strict(self) -> bool:
        return self.version >= STRICT_FROM[self.api_key]

    def _entries(self) -> list[Any]:
        if self.api_key == ApiKey.DELETE_TOPICS and self.version < 6:
            return self.message.topic_names
        return self.message.topics

    @frame_errors("topic mutation request")
    def encode_keeping(self, indexes: list[int]) -> bytes:
        """The request as a frame with only the topics at `indexes`, in their order."""
        entries = self._entries()
        kept = [entries[i] for i in indexes]
        if self.api_key == ApiKey.DELETE_TOPICS and self.version < 6:
            self.message.topic_names = kept
        else:
            self.message.topics = kept
        try:
            body = bytes(self.message.encode())
        finally:
            if self.api_key == ApiKey.DELETE_TOPICS and self.version < 6:
                self.message.topic_names = entries
            else:
                self.message.topics = entries
        return pack(">i", len(self.header) + len(body)) + self.header + body


@frame_errors("topic mutation request")
def decode_mutation(
    frame: memoryview, body_offset: int, api_key: int, version: int, max_elements: int = NO_LIMIT
) -> MutationRequest:
    """A topic mutation, checked whole as Kafka parses it first (wire_walk: Kafka's limits), and
    decoded only within `max_elements` array elements (ElementsOverLimit names max_decoded_elements)."""
    cls = _REQUESTS[api_key]
    _wire.check(cls, version, frame, body_offset, max_elements, f"proxy.{DECODED_ELEMENTS_KEY}")
    try:
        message = cls.decode(frame[body_offset:], version=version)
    except Exception as exc:  # kafka-python raises assorted errors on bad bytes
        raise FrameError(f"cannot decode {cls.__name__} v{version}: {exc}") from exc
    # A decoded message leaves its header slot unset; DeleteTopicsRequest.encode (which always
    # passes a version) would trip over it when the request is re-encoded.
    message._header = None
    if api_key == ApiKey.CREATE_TOPICS:
        topics = [
            MutationTopic(t.name, None, t.num_partitions if t.num_partitions > 0 else len(t.assignments) or -1)
            for t in message.topics
        ]
        validate_only = bool(message.validate_only) if version >= 1 else False
    elif api_key == ApiKey.CREATE_PARTITIONS:
        topics = [MutationTopic(t.name, None, t.count) for t in message.topics]
        validate_only = bool(message.validate_only)
    elif version >= 6:
        topics = [MutationTopic(t.name, t.topic_id, 0) for t in message.topics]
        validate_only = False
    else:
        topics = [MutationTopic(name, None, 0) for name in message.topic_names]
        validate_only = False
    header = bytes(frame[FRAME_SIZE_BYTES:body_offset])
    return MutationRequest(api_key, version, header, message, topics, validate_only)


def _refusal(request: MutationRequest, topic: MutationTopic) -> Any:
    version = request.version
    if request.api_key == ApiKey.CREATE_TOPICS:
        return CreateTopicsResponse.CreatableTopicResult(
            version=version,
            name=topic.name,
            error_code=THROTTLING_QUOTA_EXCEEDED,
            error_message=QUOTA_EXCEEDED_MESSAGE,
            num_partitions=-1,
            replication_factor=-1,
            configs=[],
        )
    if request.api_key == ApiKey.CREATE_PARTITIONS:
        return CreatePartitionsResponse.CreatePartitionsTopicResult(
            version=version, name=topic.name, error_code=THROTTLING_QUOTA_EXCEEDED, error_message=QUOTA_EXCEEDED_MESSAGE
        )
    fields = {"topic_id": topic.topic_id} if version >= 6 and topic.topic_id is not None else {}
    return DeleteTopicsResponse.DeletableTopicResult(
        version=version,
        name=topic.name,
        error_code=THROTTLING_QUOTA_EXCEEDED,
        error_message=QUOTA_EXCEEDED_MESSAGE,
        **fields,
    )


def _results_field(api_key: int) -> str:
    return {ApiKey.CREATE_TOPICS: "topics", ApiKey.DELETE_TOPICS: "responses", ApiKey.CREATE_PARTITIONS: "results"}[
        api_key
    ]


def _response_frame(correlation_id_and_header: bytes, response: Any) -> bytes:
    body = bytes(response.encode())
    return pack(">i", len(correlation_id_and_header) + len(body)) + correlation_id_and_header + body


def refusal_response(request: MutationRequest, correlation_id: int, refused: list[int], throttle_ms: int) -> bytes:
    """A whole response made by the proxy: every topic at `refused` gets THROTTLING_QUOTA_EXCEEDED."""
    cls = _RESPONSES[request.api_key]
    response = cls(version=request.version, throttle_time_ms=min(throttle_ms, THROTTLE_MAX_MS))
    setattr(response, _results_field(request.api_key), [_refusal(request, request.topics[i]) for i in refused])
    flexible = is_flexible(request.api_key, request.version)
    return _response_frame(pack(">i", correlation_id) + (b"\x00" if flexible else b""), response)


@dataclass(frozen=True, slots=True)
class TopicResult:
    name: str | None
    error_code: int
    num_partitions: int  # CreateTopics v5+: the partitions created; −1 when unknown


@frame_errors("topic mutation response")
def decode_results(frame: memoryview | bytes, api_key: int, version: int) -> tuple[Any, list[TopicResult]]:
    view = memoryview(frame)
    body_offset = response_body_offset(view, api_key, version)
    cls = _RESPONSES[api_key]
    try:
        response = cls.decode(view[body_offset:], version=version)
    except Exception as exc:
        raise FrameError(f"cannot decode {cls.__name__} v{version}: {exc}") from exc
    results = [
        TopicResult(entry.name, entry.error_code, getattr(entry, "num_partitions", -1) if version >= 5 else -1)
        for entry in getattr(response, _results_field(api_key))
    ]
    return response, results


@frame_errors("topic mutation response")
def merge_refusals(
    frame: memoryview | bytes, request: MutationRequest, forwarded: list[int], refused: list[int], response: Any
) -> bytes:
    """The broker's response for the `forwarded` topics with the `refused` ones merged back in, all
    in the order the client sent them."""
    view = memoryview(frame)
    body_offset = response_body_offset(view, request.api_key, request.version)
    field = _results_field(request.api_key)
    answered = list(getattr(response, field))
    if len(answered) != len(forwarded):
        raise FrameError(f"broker answered {len(answered)} topics for the {len(forwarded)} forwarded")
    by_index = dict(zip(forwarded, answered, strict=True))
    by_index.update({i: _refusal(request, request.topics[i]) for i in refused})
    setattr(response, field, [by_index[i] for i in sorted(by_index)])
    return _response_frame(bytes(view[FRAME_SIZE_BYTES:body_offset]), response)
