"""[cluster]: one Redis, a Redis Cluster or a primary under Sentinel, with TLS and an ACL user; and the
client each becomes (quotagate.proxy.cluster.connect), built without sending anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection
from redis.asyncio.sentinel import SentinelConnectionPool, SentinelManagedSSLConnection
from redis.exceptions import NoScriptError

from quotagate.config import ConfigError, parse_config
from quotagate.config.settings import ClusterConfig
from quotagate.proxy.cluster import SharedQuotas, connect, describe
from quotagate.proxy.metrics import ProxyMetrics

PROXY = '[proxy]\nbootstrap_servers = ["k:9092"]\n[cluster]\n'


def cluster(text: str) -> ClusterConfig:
    return parse_config(PROXY + text).cluster


def test_cluster_nodes_and_sentinels_are_parsed_beside_redis_url(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    nodes = cluster(
        f'redis_cluster_nodes = ["10.0.0.5:6379", "[::1]:7000"]\nredis_username = "quotagate"\n'
        f'redis_password_file = "{password}"\nredis_tls = true\n'
    )
    assert nodes.redis_cluster_nodes == (("10.0.0.5", 6379), ("::1", 7000))
    assert (nodes.redis_username, nodes.redis_tls, nodes.uses_redis) == ("quotagate", True, True)
    sentinels = cluster('redis_sentinels = ["s1:26379", "s2:26379"]\nredis_sentinel_service = "quotas"\n')
    assert sentinels.redis_sentinels == (("s1", 26379), ("s2", 26379))
    assert sentinels.redis_sentinel_service == "quotas"
    assert parse_config(PROXY + 'redis_sentinels = ["s1:26379"]\nredis_sentinel_service = "q"\n').shares_quotas


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ('redis_url = "redis://r:6379"\nredis_cluster_nodes = ["n:6379"]\n', "redis_cluster_nodes", "give one of"),
        ('redis_cluster_nodes = ["n:6379"]\nredis_sentinels = ["s:26379"]\n', "redis_sentinels", "give one of"),
        ('redis_cluster_nodes = "n:6379"\n', "redis_cluster_nodes", "must be a list"),
        ('redis_cluster_nodes = ["n"]\n', "redis_cluster_nodes", "host:port"),
        ('redis_sentinels = ["s:70000"]\n', "redis_sentinels", "port in 1..65535"),
        ('redis_sentinels = ["s:26379"]\n', "redis_sentinel_service", "is required"),
        ('redis_url = "redis://r:6379"\nredis_sentinel_service = "q"\n', "redis_sentinel_service", "only used"),
        ('redis_cluster_nodes = ["n:6379"]\nredis_tls = "yes"\n', "redis_tls", "true or false"),
        ('redis_url = "redis://r:6379"\nredis_tls = true\n', "redis_tls", "rediss://"),
        ('redis_url = "redis://r:6379"\nredis_password_file = "/nonexistent/pw"\n', "redis_password_file", "no such"),
        ('redis_url = "rediss://r:6379"\nredis_tls_ca = "/nonexistent/ca.pem"\n', "redis_tls_ca", "no such file"),
        ('key_prefix = "q{x}:"\n', "key_prefix", "must not contain"),
        (
            'redis_url = "redis://r:6379"\nredis_sentinel_password_file = "' + __file__ + '"\n',
            "redis_sentinel_password_file",
            "only used with redis_sentinels",
        ),
        ('redis_url = "redis://r:6379"\nredis_tls_ca = "' + __file__ + '"\n', "redis_tls_ca", "only used with TLS"),
    ],
)
def test_a_bad_cluster_key_is_refused_by_name(text: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        cluster(text)
    assert info.value.key == "cluster." + key
    assert problem in str(info.value)


def test_each_topology_gets_its_client_with_the_acl_user_password_and_tls(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    common = f'redis_username = "quotagate"\nredis_password_file = "{password}"\nredis_tls_ca = "{ca}"\n'

    single = connect(cluster('redis_url = "rediss://r:6380/0"\n' + common))
    assert isinstance(single, Redis)
    kwargs = single.connection_pool.connection_kwargs
    assert single.connection_pool.connection_class is SSLConnection
    assert (kwargs["username"], kwargs["password"], kwargs["ssl_ca_certs"]) == ("quotagate", "s3cret", str(ca))

    nodes = connect(cluster('redis_cluster_nodes = ["n1:7000", "n2:7001"]\nredis_tls = true\n' + common))
    assert isinstance(nodes, RedisCluster)
    assert [(n.host, n.port) for n in nodes.nodes_manager.startup_nodes.values()] == [("n1", 7000), ("n2", 7001)]
    node_kwargs = nodes.get_connection_kwargs()
    assert node_kwargs["connection_class"] is SSLConnection
    assert (node_kwargs["username"], node_kwargs["password"]) == ("quotagate", "s3cret")

    sentinel_password = tmp_path / "sentinel-password"
    sentinel_password.write_text("sentinel-s3cret\n")
    primary = connect(
        cluster(
            'redis_sentinels = ["s1:26379"]\nredis_sentinel_service = "quotas"\nredis_tls = true\n'
            f'redis_sentinel_password_file = "{sentinel_password}"\n' + common
        )
    )
    assert isinstance(primary, Redis)
    pool = primary.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "quotas"
    assert pool.connection_class is SentinelManagedSSLConnection
    assert (pool.connection_kwargs["username"], pool.connection_kwargs["password"]) == ("quotagate", "s3cret")
    (sentinel,) = pool.sentinel_manager.sentinels
    assert sentinel.connection_pool.connection_class is SSLConnection
    assert sentinel.connection_pool.connection_kwargs["password"] == "sentinel-s3cret"  # theirs, not the primary's
    assert connect(ClusterConfig()) is None


def test_the_logs_name_the_redis_without_its_password() -> None:
    assert describe(ClusterConfig(redis_url="redis://u:pw@r:6379/0")) == "redis://u:***@r:6379/0"
    assert describe(ClusterConfig(redis_url="redis://r:6379/0")) == "redis://r:6379/0"
    assert describe(ClusterConfig(redis_cluster_nodes=(("n1", 7000), ("n2", 7001)))) == "cluster n1:7000,n2:7001"
    sentinels = ClusterConfig(redis_sentinels=(("s1", 26379),), redis_sentinel_service="q")
    assert describe(sentinels) == "primary 'q' of sentinels s1:26379"


def test_every_bucket_key_carries_a_hash_tag_of_its_own() -> None:
    shared = SharedQuotas(ClusterConfig(), 1, ProxyMetrics(), lambda: 0.0)
    producer = shared._key(("producer_byte_rate", "user-client", "alice", "{evil}"))
    fetch = shared._key(("consumer_byte_rate", "user-client", "alice", "{evil}"))
    assert producer.startswith("quotagate:bucket:{") and producer.endswith(
        ':["producer_byte_rate","user-client","alice","{evil}"]'
    )
    tag = producer[producer.index("{") + 1 : producer.index("}")]
    assert len(tag) == 12 and tag not in fetch  # the first {...} is ours, never the client-id's


class AnsweringPipeline:
    """A pipeline double: each EVALSHA gets the next canned answer (an exception where a node failed)."""

    def __init__(self, answers: list[object]) -> None:
        self.answers = answers
        self.sent: list[tuple[object, ...]] = []

    def execute_command(self, *args: object) -> None:
        self.sent.append(args)

    async def execute(self, raise_on_error: bool = True) -> list[object]:
        assert not raise_on_error  # answers are per call: one failed node must not hide the others'
        answers, self.answers = self.answers[: len(self.sent)], self.answers[len(self.sent) :]
        self.sent = []
        return answers


class AnsweringRedis:
    def __init__(self, *rounds: list[object]) -> None:
        self.rounds = list(rounds)
        self.loads = 0

    def pipeline(self, transaction: bool = False) -> AnsweringPipeline:
        return AnsweringPipeline(self.rounds.pop(0))

    async def script_load(self, _script: str) -> str:
        self.loads += 1
        return "sha"


def shared_with(redis: AnsweringRedis, buckets: int) -> tuple[SharedQuotas, list]:
    shared = SharedQuotas(ClusterConfig(), 1, ProxyMetrics(), lambda: 0.0)
    shared.redis = redis  # type: ignore[assignment]
    # Made before the first connection: local buckets, each asking to join at the next tick.
    held = [shared.bucket((f"key-{i}",), 1000.0, 1000.0, 0.0) for i in range(buckets)]
    shared.connected = True
    return shared, held


async def test_a_failed_node_fails_the_tick_after_the_grants_of_the_others_are_applied() -> None:
    redis = AnsweringRedis([[b"90", b"800"], ConnectionError("node 2 down")])
    shared, (granted, failed) = shared_with(redis, 2)
    with pytest.raises(ConnectionError, match="node 2 down"):
        await shared._sync()
    assert (granted.held, failed.held) == (90.0, 0.0)


async def test_a_noscript_answer_loads_the_script_and_resends_only_those_calls() -> None:
    redis = AnsweringRedis([[b"90", b"800"], NoScriptError("NOSCRIPT")], [[b"50", b"700"]])
    shared, (first, second) = shared_with(redis, 2)
    await shared._sync()
    assert redis.loads == 1 and (first.held, second.held) == (90.0, 50.0)
    assert shared.metrics.cluster_redis_calls_total._value.get() == 3
