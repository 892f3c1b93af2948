"""Three quotagate processes in front of one broker share each quota through one Redis (issue 15).

Every client-id is spread across the three proxies (one client per proxy): without sharing each
would get its whole quota from each proxy, 3x in total. Rates are measured from the clients'
side, after a warm-up that spends the burst; bursts are one second (quota_window_num = 1)."""

from __future__ import annotations

import time

import pytest

from tests.support.kafka_clients import (
    QUOTA,
    WINDOWS,
    Acked,
    confluent_producer_loop,
    quota_config,
    rate_between,
    run_threads,
)
from tests.support.kafka_helpers import create_topic, unique_topic
from tests.support.mutation_client import THROTTLED, call, cleanup, create
from tests.support.proxy_fixtures import metric


def shared_proxies(proxy_factory, kafka, redis_server, extra_toml: str, count: int = 3, proxy_toml: str = "") -> list:
    cluster = f'\n[cluster]\nredis_url = "{redis_server.url}"\n'
    return [proxy_factory(kafka.bootstrap, extra_toml + cluster, proxy_toml) for _ in range(count)]


def test_one_client_id_across_three_proxies_gets_its_quota_once_and_within_a_third_each_without_redis(
    proxy_factory, kafka, redis_server
) -> None:
    proxies = shared_proxies(
        proxy_factory,
        kafka,
        redis_server,
        WINDOWS + quota_config(f'client_id = "spread"\nproducer_byte_rate = {QUOTA}'),
    )
    topic = unique_topic("shared")
    create_topic(proxies[0].bootstrap, topic, partitions=3)
    acked = Acked()
    seconds = 40.0
    started = time.monotonic()

    def take_redis_away() -> None:
        time.sleep(16)
        redis_server.stop()
        time.sleep(12)
        redis_server.start()

    run_threads(
        *(lambda p=p: confluent_producer_loop(p.bootstrap, topic, "spread", seconds, acked) for p in proxies),
        take_redis_away,
    )
    shared = rate_between(acked.events, started + 3, started + 16)
    without_redis = rate_between(acked.events, started + 17, started + 28)
    rejoined = rate_between(acked.events, started + 31, started + seconds)
    print(f"shared {shared / QUOTA:.3f}x, Redis down {without_redis / QUOTA:.3f}x, rejoined {rejoined / QUOTA:.3f}x")
    assert shared == pytest.approx(QUOTA, rel=0.10), f"three proxies together let {shared:.0f} B/s through"
    # Each proxy enforces a third alone (N = 3 from the registry): the total stays within the quota.
    assert without_redis <= QUOTA * 1.10, f"{without_redis:.0f} B/s went through with Redis down"
    assert without_redis >= QUOTA * 0.6, f"only {without_redis:.0f} B/s with Redis down: the shares went unused"
    assert rejoined == pytest.approx(QUOTA, rel=0.10), f"{rejoined:.0f} B/s after Redis came back"
    for proxy in proxies:
        assert metric(proxy, "quotagate_cluster_fallback") == 0
        assert metric(proxy, "quotagate_cluster_processes") == 3
        log = proxy.log_text()
        assert "unreachable" in log and log.rindex("reachable: quotas shared by") > log.index("unreachable")


def test_the_controller_mutation_quota_holds_across_three_proxies(proxy_factory, kafka, redis_server) -> None:
    # 5 partitions/s, burst 500: one broker admits 7 topics of 80 partitions, then refuses (strict).
    proxies = shared_proxies(
        proxy_factory,
        kafka,
        redis_server,
        "controller_quota_window_num = 100\n" + quota_config('client_id = "<default>"\ncontroller_mutation_rate = 5'),
    )
    names: list[str] = []
    admitted = 0
    refused: dict[int, int] = {}  # proxy index -> throttle of its refusal
    try:
        for attempt in range(30):
            index = attempt % 3
            name = unique_topic("shm")
            names.append(name)
            response = call(proxies[index].port, create(7, [name], 80), "spread-admin")
            (topic,) = response.topics
            if topic.error_code == 0:
                admitted += 1
            else:
                assert topic.error_code == THROTTLED
                refused[index] = response.throttle_time_ms
            if len(refused) == 3:
                break
            time.sleep(0.3)  # one lease tick at least: each proxy has told Redis what it admitted
        print(f"admitted {admitted} topics of 80 partitions; throttles {refused}")
        # One process would admit 7; three without sharing 21. Each proxy may let one create past
        # a shared bucket it has not heard from yet (its credit, strict mode).
        assert 7 <= admitted <= 9, f"{admitted} topics of 80 partitions admitted across three proxies"
        # The debt is shared: once every proxy has heard of it, they all name the same wait.
        time.sleep(0.3)
        throttles = []
        for proxy in proxies:
            name = unique_topic("shm")
            names.append(name)
            response = call(proxy.port, create(7, [name], 80), "spread-admin")
            assert response.topics[0].error_code == THROTTLED
            throttles.append(response.throttle_time_ms)
        print(f"throttles of the three proxies, one after the other: {throttles}")
        assert max(throttles) - min(throttles) <= 1000, f"throttles disagree: {throttles}"
    finally:
        cleanup(kafka, names)


def test_per_topic_thresholds_hold_across_three_proxies(proxy_factory, kafka, redis_server) -> None:
    total, hot = 300_000, 150_000
    topic = unique_topic("hot")
    proxies = shared_proxies(
        proxy_factory,
        kafka,
        redis_server,
        WINDOWS
        + f"[topic_thresholds]\ntotal_bytes_in_per_sec = {total}\n[topic_thresholds.topics]\n'{topic}' = {hot}\n",
    )
    create_topic(proxies[0].bootstrap, topic, partitions=3)
    acked = Acked()
    seconds = 14.0
    started = time.monotonic()
    run_threads(
        *(
            lambda p=p: confluent_producer_loop(p.bootstrap, topic, f"hot-{p.port}", seconds, acked, {"retries": 0})
            for p in proxies
        )
    )
    accepted = rate_between(acked.events, started + 3, started + seconds)
    print(f"hot accepted {accepted:.0f} B/s through three proxies (total threshold {total})")
    # Refused only when both the total and hot are over: hot alone gets the total, once, not 3x.
    assert accepted == pytest.approx(total, rel=0.15), f"{accepted:.0f} B/s accepted for hot through three proxies"


def test_two_replicas_of_two_workers_share_one_quota(proxy_factory, kafka, redis_server) -> None:
    proxies = shared_proxies(
        proxy_factory,
        kafka,
        redis_server,
        WINDOWS + quota_config(f'client_id = "workers"\nproducer_byte_rate = {QUOTA}'),
        count=2,
        proxy_toml="workers = 2\n",
    )
    topic = unique_topic("workers")
    create_topic(proxies[0].bootstrap, topic, partitions=3)
    acked = Acked()
    seconds = 16.0
    started = time.monotonic()
    # Three clients per replica: the kernel spreads their connections over its two workers.
    run_threads(
        *(
            lambda p=p: confluent_producer_loop(p.bootstrap, topic, "workers", seconds, acked)
            for p in proxies
            for _ in range(3)
        )
    )
    rate = rate_between(acked.events, started + 3, started + seconds)
    print(f"2 replicas x 2 workers: {rate / QUOTA:.3f}x the quota")
    assert rate == pytest.approx(QUOTA, rel=0.10), f"four processes let {rate:.0f} B/s through"
    for proxy in proxies:
        for worker in (0, 1):  # each worker serves its own metrics, on metrics.port + worker
            assert metric(proxy, "quotagate_cluster_processes", worker) == 4
    served = [metric(p, "quotagate_cluster_redis_calls_total", w) for p in proxies for w in (0, 1)]
    assert all(calls > 0 for calls in served), f"Redis calls per worker: {served}"
