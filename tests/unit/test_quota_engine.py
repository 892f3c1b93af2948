"""The quota engine with time passed in: Kafka's numbers, precedence, sharing, live changes."""

import pytest

from quotagate.quotas import DEFAULT, QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows, TokenBucket
from tests.support.quota_ladder import KAFKA_PRECEDENCE_SCENARIO

PRODUCE = QuotaKey.PRODUCER_BYTE_RATE
REQUEST = QuotaKey.REQUEST_PERCENTAGE
MUTATION = QuotaKey.CONTROLLER_MUTATION_RATE


def test_token_bucket_reproduces_kafkas_token_bucket_test() -> None:
    # Kafka TokenBucketTest: Q=5/s, W=2 s, S=10 samples -> burst 100.
    bucket = TokenBucket.full(rate=5, burst=5 * 10 * 2, now=0.0)
    bucket.record(60, now=0.0)
    assert bucket.tokens == 40
    bucket.record(5, now=2.0)
    assert bucket.tokens == 45
    bucket.record(60, now=4.0)
    assert bucket.tokens == -5
    assert bucket.throttle_ms(now=4.0) == 1000


def test_token_bucket_never_refills_above_the_burst() -> None:
    bucket = TokenBucket.full(rate=10, burst=20, now=0.0)
    bucket.record(5, now=0.0)
    bucket.refill(now=1000.0)
    assert bucket.tokens == 20


def test_seed_example_burst_of_560_on_rate_5_burst_500_throttles_12_seconds() -> None:
    bucket = TokenBucket.full(rate=5, burst=500, now=0.0)
    bucket.record(560, now=0.0)
    assert bucket.tokens == -60
    assert bucket.throttle_ms(now=0.0) == 12000
    assert bucket.throttle_ms(now=5.0) == 7000


def precedence_table(*, without: tuple[QuotaEntity, ...] = ()) -> QuotaTable:
    return QuotaTable(
        {entity: {PRODUCE: value} for entity, value in KAFKA_PRECEDENCE_SCENARIO.items() if entity not in without}
    )


@pytest.mark.parametrize(
    ("user", "client_id", "expected"),
    [("userA", "client1", 5000), ("userA", "client2", 4000), ("userB", "client2", 8000), ("userD", "any", 3000)],
)
def test_precedence_matches_kafkas_client_quota_manager_test(user: str, client_id: str, expected: int) -> None:
    assert precedence_table().resolve(user, client_id, PRODUCE).value == expected


def test_precedence_falls_back_when_defaults_are_removed() -> None:
    without_user_client_default = precedence_table(without=(QuotaEntity(DEFAULT, DEFAULT),))
    assert without_user_client_default.resolve("userD", "any", PRODUCE).value == 1000
    without_user_defaults = precedence_table(without=(QuotaEntity(DEFAULT, DEFAULT), QuotaEntity(DEFAULT, None)))
    assert without_user_defaults.resolve("userD", "any", PRODUCE).value == 2000


def test_precedence_is_evaluated_separately_for_each_key() -> None:
    table = QuotaTable(
        {QuotaEntity("alice", "app"): {PRODUCE: 100}, QuotaEntity("alice", None): {REQUEST: 5, PRODUCE: 999}}
    )
    assert table.resolve("alice", "app", PRODUCE).level == 1
    assert table.resolve("alice", "app", REQUEST).level == 3
    assert table.resolve("alice", "app", QuotaKey.CONSUMER_BYTE_RATE) is None


def test_user_quota_is_shared_by_its_client_ids() -> None:
    engine = QuotaEngine(QuotaTable({QuotaEntity("alice", None): {PRODUCE: 100}}), QuotaWindows(quota_window_num=1))
    assert engine.charge("alice", "app-1", PRODUCE, 100, now=0.0) == 0
    assert engine.charge("alice", "app-2", PRODUCE, 100, now=0.0) == 1000  # same bucket, now 100 in debt
    assert engine.charge("bob", "app-1", PRODUCE, 10_000, now=0.0) == 0  # no quota for bob


def test_default_client_id_quota_gives_each_client_id_its_own_bucket() -> None:
    engine = QuotaEngine(QuotaTable({QuotaEntity(None, DEFAULT): {PRODUCE: 100}}), QuotaWindows(quota_window_num=1))
    assert engine.charge("alice", "app-1", PRODUCE, 150, now=0.0) == 500
    assert engine.charge("alice", "app-2", PRODUCE, 50, now=0.0) == 0
    # Level 8 buckets are per client-id, shared across users.
    assert engine.charge("bob", "app-1", PRODUCE, 50, now=0.0) == 1000


def test_default_burst_is_rate_times_window_num_times_window_size() -> None:
    engine = QuotaEngine(QuotaTable({QuotaEntity("u", None): {PRODUCE: 1000}}))  # 11 windows of 1 s
    assert engine.charge("u", "c", PRODUCE, 11_000, now=0.0) == 0
    assert engine.charge("u", "c", PRODUCE, 1000, now=0.0) == 1000


def test_request_percentage_is_ms_per_second_and_its_throttle_is_capped_at_one_window() -> None:
    engine = QuotaEngine(QuotaTable({QuotaEntity("u", None): {REQUEST: 10}}), QuotaWindows(quota_window_num=1))
    # 10 % of a thread = 100 ms per second, burst 100 ms.
    assert engine.charge("u", "c", REQUEST, 100, now=0.0) == 0
    assert engine.charge("u", "c", REQUEST, 50, now=0.0) == 500
    assert engine.charge("u", "c", REQUEST, 5000, now=0.0) == 1000  # capped at one 1 s window


def test_controller_mutation_burst_uses_the_controller_windows() -> None:
    # Kafka ControllerMutationQuotaManagerTest: S=10, W=1, Q=10.
    windows = QuotaWindows(controller_quota_window_num=10, controller_quota_window_size_seconds=1)
    engine = QuotaEngine(QuotaTable({QuotaEntity("u", None): {MUTATION: 10}}), windows)
    assert engine.charge("u", "c", MUTATION, 90, now=0.0) == 0
    assert engine.charge("u", "c", MUTATION, 90, now=0.0) == 8000
    assert engine.throttle_ms("u", "c", MUTATION, now=5.0) == 3000


def test_a_quota_change_applies_live_without_forgiving_debt() -> None:
    entity = QuotaEntity("u", None)
    engine = QuotaEngine(QuotaTable({entity: {PRODUCE: 100}}), QuotaWindows(quota_window_num=1))
    engine.charge("u", "c", PRODUCE, 300, now=0.0)  # 200 in debt at 100/s
    assert engine.throttle_ms("u", "c", PRODUCE, now=0.0) == 2000
    engine.update(QuotaTable({entity: {PRODUCE: 1000}}), engine.windows, now=1.0)  # 100 in debt now
    assert engine.throttle_ms("u", "c", PRODUCE, now=1.0) == 100  # same debt, paid at the new rate
    assert engine.throttle_ms("u", "c", PRODUCE, now=1.1) == 0


def test_removing_a_quota_makes_the_client_unlimited() -> None:
    engine = QuotaEngine(QuotaTable({QuotaEntity("u", None): {PRODUCE: 100}}), QuotaWindows(quota_window_num=1))
    engine.charge("u", "c", PRODUCE, 1000, now=0.0)
    engine.update(QuotaTable(), engine.windows, now=0.5)
    assert engine.charge("u", "c", PRODUCE, 1000, now=0.5) == 0
    assert engine.buckets == {}


def test_idle_full_buckets_expire_and_indebted_ones_stay() -> None:
    engine = QuotaEngine(QuotaTable({QuotaEntity(None, DEFAULT): {PRODUCE: 1}}), QuotaWindows(quota_window_num=1))
    engine.charge("u", "idle", PRODUCE, 1, now=0.0)
    engine.charge("u", "debtor", PRODUCE, 10_000, now=0.0)
    assert engine.expire_idle(now=4000.0) == 1
    assert [bucket_id[3] for bucket_id in engine.buckets] == ["debtor"]


def mutation_engine(rate: float, window_num: int) -> QuotaEngine:
    windows = QuotaWindows(controller_quota_window_num=window_num, controller_quota_window_size_seconds=1)
    return QuotaEngine(QuotaTable({QuotaEntity("u", None): {MUTATION: rate}}), windows)


def test_seed_example_seven_topics_of_80_partitions_are_all_admitted_then_throttle_12_seconds() -> None:
    engine = mutation_engine(rate=5, window_num=100)  # burst 500
    assert engine.admit("u", "c", MUTATION, [80] * 7, strict=True, now=0.0) == [True] * 7
    assert engine.throttle_ms("u", "c", MUTATION, now=0.0) == 12000
    assert engine.admit("u", "c", MUTATION, [1], strict=True, now=1.0) == [False]


def test_kafka_example_strict_admits_one_of_two_topics_and_permissive_admits_both() -> None:
    strict = mutation_engine(rate=2, window_num=10)  # burst 20
    assert strict.admit("u", "c", MUTATION, [30, 30], strict=True, now=0.0) == [True, False]
    assert strict.throttle_ms("u", "c", MUTATION, now=0.0) == 5000
    permissive = mutation_engine(rate=2, window_num=10)
    assert permissive.admit("u", "c", MUTATION, [30, 30], strict=False, now=0.0) == [True, True]
    assert permissive.throttle_ms("u", "c", MUTATION, now=0.0) == 20000


def test_a_refund_gives_back_what_a_rejected_topic_was_charged() -> None:
    engine = mutation_engine(rate=2, window_num=10)
    engine.admit("u", "c", MUTATION, [30], strict=True, now=0.0)
    engine.refund("u", "c", MUTATION, 30, now=0.0)
    assert engine.throttle_ms("u", "c", MUTATION, now=0.0) == 0
    engine.refund("u", "c", MUTATION, 1000, now=0.0)  # never above the burst
    assert engine.admit("u", "c", MUTATION, [20, 1], strict=True, now=0.0) == [True, True]
