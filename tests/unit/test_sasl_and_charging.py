"""Who a SASL client is, and what each exchange costs under which quota key."""

import pytest

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.sasl import user_from_auth_bytes
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.apis import policy
from quotagate.quotas.charging import charge_request, charge_response, request_time_ms


@pytest.mark.parametrize(
    ("mechanism", "auth_bytes", "user"),
    [
        ("PLAIN", b"\0alice\0alice-secret", "alice"),
        ("PLAIN", b"admin\0alice\0pw", "admin"),  # the authorization id wins, as in Kafka
        ("PLAIN", b"garbage", None),
        ("SCRAM-SHA-256", b"n,,n=bob,r=fyko+d2lbbFgONRv9qkxdawL", "bob"),
        ("SCRAM-SHA-512", b"n,,n=we=2Cird=3Dname,r=abc", "we,ird=name"),
        ("SCRAM-SHA-256", b"c=biws,r=fyko,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=", None),  # client-final
    ],
)
def test_user_is_read_from_the_client_first_sasl_message(mechanism: str, auth_bytes: bytes, user: str | None) -> None:
    assert user_from_auth_bytes(mechanism, auth_bytes) == user


def test_a_fetch_is_not_charged_its_long_poll_wait() -> None:
    assert request_time_ms(policy(ApiKey.FETCH), latency_ms=503.0, fetch_max_wait_ms=500) == pytest.approx(3.0)
    assert request_time_ms(policy(ApiKey.FETCH), latency_ms=20.0, fetch_max_wait_ms=500) == 0.0
    assert request_time_ms(policy(ApiKey.FETCH), latency_ms=2.5, fetch_max_wait_ms=0) == 2.5
    assert request_time_ms(policy(ApiKey.METADATA), latency_ms=2.5, fetch_max_wait_ms=0) == 2.5


def engine_with(**quotas: float) -> QuotaEngine:
    table = QuotaTable({QuotaEntity("u", None): {QuotaKey(k): v for k, v in quotas.items()}})
    return QuotaEngine(table, QuotaWindows(quota_window_num=1))


def test_produce_is_charged_when_read_and_its_response_carries_the_throttle_as_it_stands() -> None:
    engine = engine_with(producer_byte_rate=1000)
    buckets = engine.entity_buckets("u", "c", 0.0)
    assert charge_request(buckets, policy(ApiKey.PRODUCE), 1500, now=0.0) == 500
    assert charge_response(buckets, policy(ApiKey.PRODUCE), 50, None, now=0.2) == 300  # nothing charged again


def test_fetch_is_charged_its_response_size() -> None:
    engine = engine_with(consumer_byte_rate=1000)
    buckets = engine.entity_buckets("u", "c", 0.0)
    assert charge_request(buckets, policy(ApiKey.FETCH), 80, now=0.0) == 0
    assert charge_response(buckets, policy(ApiKey.FETCH), 3000, None, now=0.0) == 2000


def test_produce_throttle_is_the_larger_of_byte_rate_and_request_time() -> None:
    engine = engine_with(producer_byte_rate=1000, request_percentage=1)  # 10 ms/s
    buckets = engine.entity_buckets("u", "c", 0.0)
    charge_request(buckets, policy(ApiKey.PRODUCE), 1100, now=0.0)
    assert charge_response(buckets, policy(ApiKey.PRODUCE), 0, 40.0, now=0.0) == 1000  # request time, capped
    assert charge_response(buckets, policy(ApiKey.PRODUCE), 0, None, now=0.0) == 100  # byte rate alone


def test_exempt_exchanges_charge_no_request_time() -> None:
    engine = engine_with(request_percentage=1)
    buckets = engine.entity_buckets("u", "c", 0.0)
    assert charge_response(buckets, policy(ApiKey.HEARTBEAT), 10, None, now=0.0) == 0
    assert buckets.request is not None and buckets.request.tokens == buckets.request.burst
