"""The versions the proxy offers in its ApiVersions answer: per API, the highest one it can read.

The proxy reads a few messages whole (kafka-python's classes, generated from Kafka's schemas) and
walks a few more with `struct`. Each module that does says how far it reads (its `READABLE_UP_TO`,
derived from the classes or the layouts it has: nothing is listed by hand here), and an API is
capped at the lowest of them. So a client never asks for a response the proxy cannot read, and a
newer broker or client (Kafka 4.4 answers ApiVersions v5) costs a cap, never a connection. Three
caps are deliberate rather than forced (`DELIBERATE_CAPS`).

The caps are enforced as the broker enforces its own range: a request above its API's cap closes
the connection (`exceeds_advertised_cap`), except ApiVersions, which the proxy answers itself as
the broker answers a version it does not speak (`unsupported_api_versions`, KIP-511).
What the proxy offers is then the intersection of these caps and the broker's own ranges
(`cap_api_versions`, applied to the broker's answer).
"""

from __future__ import annotations

from struct import pack

from kafka.protocol.metadata import ApiVersionsResponse

from quotagate.protocol import client_quotas, mutations, produce, sasl, share
from quotagate.protocol.apis import RESPONSE_CLASSES, ApiKey

UNSUPPORTED_VERSION = 35

# Responses rewrite.py reads by kafka-python's classes (walked in C by their schemas, response_walk;
# ApiVersions decoded), to rewrite the brokers they name (or, ApiVersions, to cap them): read up to
# the classes' newest version.
REWRITTEN_RESPONSES = (
    ApiKey.PRODUCE,
    ApiKey.METADATA,
    ApiKey.FIND_COORDINATOR,
    ApiKey.DESCRIBE_CLUSTER,
    ApiKey.API_VERSIONS,
    ApiKey.DESCRIBE_CONFIGS,
)

# Caps the proxy chooses, below what it could read:
# - Fetch v16+ responses may carry broker addresses (KIP-951 NodeEndpoints) in top-level tagged
#   fields behind all the record data; rather than walk every fetch response, the proxy caps Fetch
#   at v15, which only costs clients the leader-change shortcut of KIP-951 (they refresh metadata
#   instead). Produce responses are small, so those are walked and rewritten instead of capped.
# - Produce v13 names topics by id instead of name; per-topic thresholds and usage records need the
#   names, and v12 still carries everything else (transactions v2 need v12).
# - DescribeQuorum v2+ lists controller endpoints; v1 has none.
FETCH_MAX_VERSION = 15
PRODUCE_MAX_VERSION = 12
DESCRIBE_QUORUM_MAX_VERSION = 1
DELIBERATE_CAPS: dict[int, int] = {
    ApiKey.FETCH: FETCH_MAX_VERSION,
    ApiKey.PRODUCE: PRODUCE_MAX_VERSION,
    ApiKey.DESCRIBE_QUORUM: DESCRIBE_QUORUM_MAX_VERSION,
}

# How far each reader reads, by API.
READERS: tuple[dict[int, int], ...] = (
    {key: RESPONSE_CLASSES[key].max_version for key in REWRITTEN_RESPONSES},
    produce.READABLE_UP_TO,
    share.READABLE_UP_TO,
    mutations.READABLE_UP_TO,
    sasl.READABLE_UP_TO,
    client_quotas.READABLE_UP_TO,
)


def _max_versions() -> dict[int, int]:
    caps: dict[int, int] = {}
    for limits in (*READERS, DELIBERATE_CAPS):
        for key, version in limits.items():
            caps[int(key)] = min(version, caps.get(int(key), version))
    return caps


# The highest version the proxy lets clients use, per API it reads; the others pass as the broker offers them.
MAX_VERSIONS: dict[int, int] = _max_versions()


def exceeds_advertised_cap(api_key: int, version: int) -> bool:
    """Whether a request uses a version that the proxy's ApiVersions answer does not offer, and is
    refused for it (the session core's table makes the same decision per request).

    The broker closes the connection on a request version it does not support (the request fails
    to parse: RequestContext.parseRequest raises InvalidRequestException and the socket server
    closes the channel), except ApiVersions, which it answers with UNSUPPORTED_VERSION (KIP-511).
    The proxy offers less than the broker, so it must refuse the rest the same way: a client that
    ignores ApiVersions must not reach versions whose responses the proxy cannot read. ApiVersions
    above its cap is answered by the proxy instead (`unsupported_api_versions`)."""
    cap = MAX_VERSIONS.get(api_key)
    return cap is not None and version > cap and api_key != ApiKey.API_VERSIONS


def unsupported_api_versions(correlation_id: int) -> bytes:
    """The proxy's answer to an ApiVersions request above what it reads, made as the broker makes
    its answer to one above what it speaks: RequestContext serializes it as v0 (response header v0,
    no throttle time) and ApiVersionsRequest.getErrorResponse sets UNSUPPORTED_VERSION and lists
    ApiVersions' own range, here the versions the proxy reads. The client asks again at the newest
    version both know (KIP-511); if the broker behind knows fewer, its own answer says so next."""
    entry = ApiVersionsResponse.ApiVersion(
        version=0, api_key=ApiKey.API_VERSIONS, min_version=0, max_version=MAX_VERSIONS[ApiKey.API_VERSIONS]
    )
    body = bytes(ApiVersionsResponse(version=0, error_code=UNSUPPORTED_VERSION, api_keys=[entry]).encode())
    return pack(">ii", 4 + len(body), correlation_id) + body


def cap_api_versions(api_keys: list) -> list:
    """The broker's ApiVersions entries with max_version lowered to the proxy's caps (an API whose
    cap is below the broker's min_version is dropped); the order is kept."""
    kept = []
    for entry in api_keys:
        cap = MAX_VERSIONS.get(entry.api_key)
        if cap is not None:
            if cap < entry.min_version:
                continue
            entry.max_version = min(entry.max_version, cap)
        kept.append(entry)
    return kept
