"""The Kafka APIs the proxy knows by number, and the version limits it advertises to clients.

The message classes come from kafka-python's `kafka.protocol`, generated from Kafka's JSON schemas.
They tell which versions use the flexible (compact, tagged) encoding, which decides where a header
ends and so where a body starts.
"""

from __future__ import annotations

from functools import lru_cache

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer  # noqa: F401  (imported so every message class is registered)
from kafka.protocol.api_message import ApiMessage

from quotagate.protocol.api_keys import ApiKey as ApiKey  # its home: free of kafka-python

# The highest API key Apache Kafka defines (4.2: DeleteShareGroupOffsets). Metrics label API keys up
# to it by number and fold every other value a client may send into one "unknown" label, so random
# keys cannot create series.
HIGHEST_KAFKA_API_KEY = 92


def _message_classes() -> tuple[dict[int, type[ApiMessage]], dict[int, type[ApiMessage]]]:
    requests: dict[int, type[ApiMessage]] = {}
    responses: dict[int, type[ApiMessage]] = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        # Versioned wrappers (Foo_v3) carry a _class_version; only the primary class is wanted.
        if getattr(cls, "_class_version", None) is not None or getattr(cls, "_json", None) is None:
            continue
        (requests if cls.is_request() else responses)[cls.API_KEY] = cls
    return requests, responses


REQUEST_CLASSES, RESPONSE_CLASSES = _message_classes()


# APIs kafka-python's codec does not know, read off Apache Kafka's schemas: the delegation-token APIs
# are flexible from v2, and every API Kafka added from Vote (52) on is flexible from its first
# version (KIP-482), the share-group APIs (76-79) among them.
_FLEXIBLE_FROM_BEYOND_CODEC = {38: 2, 39: 2, 40: 2, 41: 2}
_FLEXIBLE_FROM_THE_START = 52


# Asked for every request and response: a C-level look-up instead of a call into the codec. Bounded:
# the pairs come from clients' bytes.
@lru_cache(maxsize=4096)
def is_flexible(api_key: int, version: int) -> bool:
    """Whether (api_key, version) uses the flexible encoding; False for keys Kafka does not define."""
    cls = REQUEST_CLASSES.get(api_key)
    if cls is not None:
        return cls.flexible_version_q(version)
    if _FLEXIBLE_FROM_THE_START <= api_key <= HIGHEST_KAFKA_API_KEY:
        return True
    return version >= _FLEXIBLE_FROM_BEYOND_CODEC.get(api_key, 1 << 15)


@lru_cache(maxsize=4096)
def response_header_is_flexible(api_key: int, version: int) -> bool:
    # ApiVersions responses always use header v0 so that a client can read them before it knows
    # which versions the broker speaks (KIP-511).
    return api_key != ApiKey.API_VERSIONS and is_flexible(api_key, version)


# Highest version the proxy lets clients use, per API. Two reasons to cap:
# - the proxy rewrites broker addresses in these responses, so it must be able to decode every
#   version a client may use: capped at what kafka-python's schemas know;
# - Fetch v16+ responses may carry broker addresses (KIP-951 NodeEndpoints) in top-level tagged
#   fields behind all the record data; rather than walk every fetch response, the proxy caps Fetch
#   at v15, which only costs clients the leader-change shortcut of KIP-951 (they refresh metadata
#   instead). Produce responses are small, so those are walked and rewritten instead of capped.
# - DescribeQuorum v2+ lists controller endpoints; v1 has none.
# - ShareFetch and ShareAcknowledge (KIP-932) end with NodeEndpoints, which the proxy walks to and
#   rewrites (share.py) in the versions whose layout it knows.
# - DescribeClientQuotas and AlterClientQuotas are answered by the proxy itself (quota_api = "proxy"):
#   capped at the versions it can decode and encode.
# - Produce v13 names topics by id instead of name; per-topic thresholds and usage records need the
#   names, and v12 still carries everything else (transactions v2 need v12), so Produce is capped.
FETCH_MAX_VERSION = 15
PRODUCE_MAX_VERSION = 12
DESCRIBE_QUORUM_MAX_VERSION = 1
SHARE_MAX_VERSION = 2

_REWRITTEN_APIS = (
    ApiKey.PRODUCE,
    ApiKey.METADATA,
    ApiKey.FIND_COORDINATOR,
    ApiKey.DESCRIBE_CLUSTER,
    ApiKey.API_VERSIONS,
    ApiKey.DESCRIBE_CONFIGS,
)

MAX_VERSIONS: dict[int, int] = {
    **{int(key): RESPONSE_CLASSES[key].max_version for key in _REWRITTEN_APIS},
    ApiKey.FETCH: FETCH_MAX_VERSION,
    ApiKey.PRODUCE: PRODUCE_MAX_VERSION,
    ApiKey.DESCRIBE_QUORUM: DESCRIBE_QUORUM_MAX_VERSION,
    ApiKey.SHARE_FETCH: SHARE_MAX_VERSION,
    ApiKey.SHARE_ACKNOWLEDGE: SHARE_MAX_VERSION,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: REQUEST_CLASSES[ApiKey.DESCRIBE_CLIENT_QUOTAS].max_version,
    ApiKey.ALTER_CLIENT_QUOTAS: REQUEST_CLASSES[ApiKey.ALTER_CLIENT_QUOTAS].max_version,
}


def exceeds_advertised_cap(api_key: int, version: int) -> bool:
    """Whether a request uses an API or a version that the proxy's ApiVersions answer does not offer.

    The broker closes the connection on a request version it does not support (the request fails
    to parse: RequestContext.parseRequest raises InvalidRequestException and the socket server
    closes the channel), except ApiVersions, which it answers with UNSUPPORTED_VERSION (KIP-511).
    The proxy offers less than the broker, so it must refuse the rest the same way: a client that
    ignores ApiVersions must not reach versions whose responses name brokers unrewritten. ApiVersions
    itself is never refused here: the broker answers it, and the answer's list is capped on its way.
    """
    cap = MAX_VERSIONS.get(api_key)
    return cap is not None and version > cap and api_key != ApiKey.API_VERSIONS


UNKNOWN_API_LABEL = "unknown"


def api_key_label(api_key: int) -> str:
    """The metric label of an API key: its number when Kafka defines one that high, else "unknown"."""
    return str(api_key) if 0 <= api_key <= HIGHEST_KAFKA_API_KEY else UNKNOWN_API_LABEL


def api_name(api_key: int) -> str:
    """Kafka's name for an API ("Produce", "Metadata"), or "Api<N>" for one the codec does not know."""
    cls = REQUEST_CLASSES.get(api_key)
    return cls.__name__.removesuffix("Request") if cls is not None else f"Api{api_key}"
