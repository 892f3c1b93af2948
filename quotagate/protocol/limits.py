"""What a client's request may make the proxy read before it is admitted or refused: Kafka's own
decoders' limits, stated once. The compiled walks (produce_walk, wire_walk), the header peek of the
session core and the docs read them here.

Kafka's generated readers (MessageDataGenerator) refuse a string longer than 32 767 bytes and an
array announcing more elements than bytes remain; Kafka 4.4 also refuses an array of more than a
million elements. A request that breaks one fails to parse (RequestContext.parseRequest throws
InvalidRequestException) and the broker closes the connection: so does the proxy, having read no
further. Tagged fields are skipped by their length; Kafka keeps unknown ones in a list whatever
their number, which no client sends (request headers define none): the proxy refuses a section of
more than MAX_TAGGED_FIELDS instead of walking millions of them.
"""

from __future__ import annotations

MAX_STRING_BYTES = 0x7FFF
MAX_ARRAY_ELEMENTS = 1_000_000
MAX_TAGGED_FIELDS = 64
# The proxy's own limit on what it decodes of one request ([proxy] max_decoded_elements): the key
# names the refusal (quotagate_frames_refused_total's reason).
DECODED_ELEMENTS_KEY = "max_decoded_elements"
NO_LIMIT = -1  # no max_decoded_elements: what the proxy decodes for itself (tests, its own requests)


def string_problem(field: str, length: int) -> str | None:
    """Why Kafka's reader refuses a string of `length` bytes for `field`, or None."""
    if length > MAX_STRING_BYTES:
        return f"string field {field} had invalid length {length} (Kafka's limit: {MAX_STRING_BYTES})"
    return None


def array_problem(field: str, count: int, remaining: int) -> str | None:
    """Why Kafka's reader refuses an array of `count` elements for `field` with `remaining` bytes
    left in the request, or None."""
    if count > MAX_ARRAY_ELEMENTS:
        return f"array field {field} has {count} elements (Kafka's limit: {MAX_ARRAY_ELEMENTS})"
    if count > remaining:
        return (
            f"array field {field}: tried to allocate a collection of size {count}, but there are only "
            f"{remaining} bytes remaining"
        )
    return None


def tagged_fields_problem(where: str, count: int) -> str | None:
    if count > MAX_TAGGED_FIELDS:
        return f"{count} tagged fields in {where} (the proxy reads at most {MAX_TAGGED_FIELDS})"
    return None
