"""The Kafka APIs the proxy knows by number, and kafka-python's message classes for them.

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

# The highest API key Apache Kafka defines (4.4: UnregisterController; 4.2 ended at 92,
# DeleteShareGroupOffsets). Metrics label API keys up to it by number and fold every other value a
# client may send into one "unknown" label, so random keys cannot create series.
HIGHEST_KAFKA_API_KEY = 94


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


UNKNOWN_API_LABEL = "unknown"


def api_key_label(api_key: int) -> str:
    """The metric label of an API key: its number when Kafka defines one that high, else "unknown"."""
    return str(api_key) if 0 <= api_key <= HIGHEST_KAFKA_API_KEY else UNKNOWN_API_LABEL


def api_name(api_key: int) -> str:
    """Kafka's name for an API ("Produce", "Metadata"), or "Api<N>" for one the codec does not know."""
    cls = REQUEST_CLASSES.get(api_key)
    return cls.__name__.removesuffix("Request") if cls is not None else f"Api{api_key}"
