"""Pure quota engine: token buckets, Kafka's entity precedence, per-key charging.

No I/O, no clock, no logging: every function takes the time (seconds, any monotonic origin) as an
argument, so tests drive time by passing it and the proxy passes its event loop's clock.
"""

from quotagate.quotas.bucket import TokenBucket
from quotagate.quotas.engine import QuotaEngine, QuotaWindows
from quotagate.quotas.entities import (
    ANONYMOUS,
    DEFAULT,
    QuotaEntity,
    QuotaKey,
    QuotaTable,
    Resolution,
)

__all__ = [
    "ANONYMOUS",
    "DEFAULT",
    "QuotaEngine",
    "QuotaEntity",
    "QuotaKey",
    "QuotaTable",
    "QuotaWindows",
    "Resolution",
    "TokenBucket",
]
