"""Three quotagate processes share one client-id's quota through a Redis Cluster (3 primaries, 3
replicas) and through a primary and replica under three sentinels (issue 27), over TLS as an ACL user.

Mid-run the primary that holds the client's bucket is killed (kill -9): the proxies that lose it fall
back to a third each, log it and count it, and rejoin once a replica is promoted. The quota holds over the
whole run, and every record the clients produced is acknowledged and in the topic."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.kafka_clients import (
    QUOTA,
    WINDOWS,
    Acked,
    Produced,
    confluent_producer_loop,
    quota_config,
    rate_between,
    run_threads,
)
from tests.support.kafka_helpers import create_topic, unique_topic
from tests.support.proxy_fixtures import metric
from tests.support.redis_fixtures import RedisClusterSet, RedisSentinelSet, TlsRedisNode

SECONDS = 16.0
KILL_AT = 8.0
PARTITIONS = 3


def records_in(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("count")})
    try:
        return sum(
            high - low
            for low, high in (
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(PARTITIONS)
            )
        )
    finally:
        consumer.close()


def bucket_primary(topology: RedisClusterSet | RedisSentinelSet) -> TlsRedisNode:
    if isinstance(topology, RedisClusterSet):
        return topology.primary_of("quotagate:bucket:*spread*")
    return topology.current_primary()


@pytest.mark.parametrize(
    "topology_fixture", ["redis_cluster", pytest.param("redis_sentinel", marks=pytest.mark.long_only)]
)
def test_one_client_id_over_three_proxies_holds_its_quota_while_its_buckets_primary_is_killed(
    topology_fixture: str, request: pytest.FixtureRequest, proxy_factory, kafka
) -> None:
    topology: RedisClusterSet | RedisSentinelSet = request.getfixturevalue(topology_fixture)
    quotas = WINDOWS + quota_config(f'client_id = "spread"\nproducer_byte_rate = {QUOTA}')
    with ThreadPoolExecutor(3) as pool:  # three starts at once: a second each saved
        proxies = list(pool.map(lambda _: proxy_factory(kafka.bootstrap, quotas + topology.cluster_toml()), range(3)))
    topic = unique_topic("topology")
    create_topic(proxies[0].bootstrap, topic, partitions=PARTITIONS)
    acked, producers = Acked(), [Produced() for _ in proxies]
    killed: list[TlsRedisNode] = []
    started = time.monotonic()

    def kill_the_buckets_primary() -> None:
        time.sleep(KILL_AT)
        node = bucket_primary(topology)
        node.kill()
        killed.append(node)

    try:
        run_threads(
            *(
                lambda p=p, produced=produced: confluent_producer_loop(
                    p.bootstrap, topic, "spread", SECONDS, acked, produced=produced
                )
                for p, produced in zip(proxies, producers, strict=True)
            ),
            kill_the_buckets_primary,
        )
        sent, failed = sum(p.sent for p in producers), sum(p.failed for p in producers)
        shared = rate_between(acked.events, started + 3, started + KILL_AT)
        whole_run = rate_between(acked.events, started + 3, started + SECONDS)
        after_kill = rate_between(acked.events, started + KILL_AT, started + SECONDS)
        print(
            f"{topology_fixture}: shared {shared / QUOTA:.3f}x, after the kill {after_kill / QUOTA:.3f}x, "
            f"whole run {whole_run / QUOTA:.3f}x; {sent} records sent"
        )
        assert killed, "the bucket's primary was not killed"
        assert QUOTA * 0.9 <= shared <= QUOTA * 1.1, f"three proxies together let {shared:.0f} B/s through"
        assert QUOTA * 0.85 <= whole_run <= QUOTA * 1.15, f"{whole_run:.0f} B/s over the run, primary killed"
        # Nothing lost: every record handed to a producer was acknowledged, and the topic holds them all.
        assert failed == 0, f"{failed} records failed"
        assert len(acked.events) == sent, f"{sent} sent, {len(acked.events)} acknowledged"
        assert records_in(proxies[0].bootstrap, topic) == sent
        # A proxy whose calls around the kill were retried by redis-py onto the promoted replica never
        # lost Redis (seen in CI: one of three), so it has no fallback to count; one that did, rejoined.
        fell_back = [proxy for proxy in proxies if metric(proxy, "quotagate_cluster_fallbacks_total") >= 1]
        assert fell_back, "no proxy saw the primary go"
        for proxy in proxies:
            assert metric(proxy, "quotagate_cluster_fallback") == 0
        for proxy in fell_back:
            assert metric(proxy, "quotagate_cluster_rejoins_total") >= 1
            log = proxy.log_text()
            assert "unreachable" in log and log.rindex("reachable: quotas shared by") > log.index("unreachable")
    finally:
        for node in killed:  # back as a replica of the promoted one (the fixture waits until it is)
            node.start()
