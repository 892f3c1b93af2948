"""What each Kafka exchange costs, and under which quota keys (spec §2, §3).

- Produce charges its request size (header + body, no size prefix) to producer_byte_rate when the
  request is read, even with acks=0, when there is no response.
- Fetch charges its response size to consumer_byte_rate, and so does ShareFetch (KIP-932: the
  broker records a share fetch's response in the same fetch quota, and caps its max_bytes by it).
- Every request that is not exempt charges its request time to request_percentage. The proxy
  cannot see broker thread time, so request time here is the upstream service time: from the
  moment the proxy forwards the request to the moment the response is back. For a Fetch, the
  broker may hold the request up to max_wait_ms waiting for data (a long poll): that wait is idle
  time, not work, so a fetch (or share fetch) is charged only what exceeds its max wait. A consumer polling with
  fetch.max.wait.ms=0 is thus charged every millisecond it makes the broker work, while an idle
  consumer with a 500 ms max wait is charged ~0 per fetch.
- Produce and the fetches throttle by the larger of their byte-rate and request-time throttles.
"""

from __future__ import annotations

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.mutations import MUTATION_APIS
from quotagate.protocol.throttle import THROTTLE_EXEMPT_APIS
from quotagate.quotas.bucket import ShadowTokenBucket
from quotagate.quotas.engine import EntityBuckets
from quotagate.quotas.entities import QuotaKey

# As plain ints: an IntEnum member look-up costs ~0.1 µs, and these run for every exchange.
_PRODUCE = int(ApiKey.PRODUCE)
# The exchanges whose response bytes go to consumer_byte_rate.
FETCH_APIS = frozenset({int(ApiKey.FETCH), int(ApiKey.SHARE_FETCH)})
# Requests that are never charged request time: authentication, and the cluster APIs Kafka exempts.
REQUEST_TIME_EXEMPT_APIS = THROTTLE_EXEMPT_APIS | {int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE)}
_MUTATION_APIS = frozenset(int(api) for api in MUTATION_APIS)


def keys_charged(api_key: int) -> tuple[QuotaKey, ...]:
    """The quota keys an exchange of `api_key` is charged to (the usage records name their quotas)."""
    keys: list[QuotaKey] = []
    if api_key == _PRODUCE:
        keys.append(QuotaKey.PRODUCER_BYTE_RATE)
    elif api_key in FETCH_APIS:
        keys.append(QuotaKey.CONSUMER_BYTE_RATE)
    elif api_key in _MUTATION_APIS:
        keys.append(QuotaKey.CONTROLLER_MUTATION_RATE)
    if api_key not in REQUEST_TIME_EXEMPT_APIS:
        keys.append(QuotaKey.REQUEST_PERCENTAGE)
    return tuple(keys)


def request_time_ms(api_key: int, latency_ms: float, fetch_max_wait_ms: int) -> float:
    if api_key in FETCH_APIS:
        return max(latency_ms - fetch_max_wait_ms, 0.0)
    return latency_ms


def charge_request(buckets: EntityBuckets, api_key: int, request_size: int, now: float) -> int:
    """Charges what is known when a request is read: a produce's size. Returns the throttle in ms.

    Charging produce bytes as they arrive (not when the answer comes back) lets the proxy stop
    reading from a client the moment it is in debt, as a broker does by reading one request at a
    time: a client that pipelines many produce requests cannot get ahead of its quota."""
    if api_key == _PRODUCE and buckets.produce is not None:
        return buckets.produce.charge(request_size, now)
    return 0


def shadow_throttle_ms(buckets: EntityBuckets, api_key: int, charged_request_time: bool, now: float) -> int:
    """The throttle a response would carry if the shadow quotas among `buckets` were binding."""
    would = 0
    bucket = buckets.produce if api_key == _PRODUCE else buckets.fetch if api_key in FETCH_APIS else None
    if isinstance(bucket, ShadowTokenBucket):
        would = bucket.would_throttle_ms(now)
    if charged_request_time and isinstance(buckets.request, ShadowTokenBucket):
        would = max(would, min(buckets.request.would_throttle_ms(now), buckets.request_cap_ms))
    return would


def charge_response(
    buckets: EntityBuckets, api_key: int, response_size: int, request_ms: float | None, now: float
) -> int:
    """Charges what is known when the response is back; returns the throttle the response carries.

    request_ms is None for exchanges exempt from request-time quotas. A produce's bytes were charged
    by charge_request; its response carries the produce throttle as it stands now. Request-time
    throttles are capped at one window (KIP-124)."""
    throttle = 0
    if api_key == _PRODUCE:
        if buckets.produce is not None:
            throttle = buckets.produce.throttle_ms(now)
    elif api_key in FETCH_APIS:
        if buckets.fetch is not None:
            throttle = buckets.fetch.charge(response_size, now)
    if request_ms is not None and buckets.request is not None:
        throttle = max(throttle, min(buckets.request.charge(request_ms, now), buckets.request_cap_ms))
    return throttle
