"""Quotas shared by several proxy processes through Redis: the I/O side of quotagate.quotas.lease.

One asyncio task per process. Every tick it gathers the buckets that want a sync (a lease to
renew, to give back, or a bucket to join) and sends them to Redis in one pipeline: one Lua script
call per bucket, atomic on Redis's side. Requests never wait on it: they spend the lease they
hold, or, while Redis is unreachable, their 1/N share locally. Every few ticks it also refreshes
this process's entry in a registry of live processes (a sorted set scored by expiry time), which
gives N for that fallback.

Redis state per bucket: a hash {tokens, ts} refilled with Redis's own clock, so the processes'
clocks never need to agree. A key expires once the bucket would be full again: an idle entity
costs Redis nothing. On shutdown every lease is given back.

Redis is one server (redis_url), a Redis Cluster (redis_cluster_nodes) or a primary under Sentinel
(redis_sentinels). Each script call touches one key, hash-tagged by its bucket, so on a cluster the
buckets spread over the primaries and redis-py's cluster pipeline splits each tick's calls per node.
A node that fails (or a failover under way) puts the whole process in fallback, as one Redis does.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
import time
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.exceptions import NoScriptError, RedisClusterException, RedisError

from quotagate.config.settings import ClusterConfig
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.supervisor import stop_if_cancel_was_swallowed
from quotagate.quotas.engine import Bucket, BucketId
from quotagate.quotas.lease import LeasedBucket, LeaseRequest

log = logging.getLogger("quotagate.cluster")

# KEYS[1]: the bucket. ARGV: rate, burst, held (lease given back), spent (to charge), want.
# Returns {grant, tokens after the grant} as strings (Lua numbers would be truncated to integers).
LEASE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now
if now > ts then tokens = math.min(burst, tokens + (now - ts) * rate) end
tokens = math.min(burst, tokens + tonumber(ARGV[3]) - tonumber(ARGV[4]))
local grant = math.min(tonumber(ARGV[5]), math.max(tokens, 0))
tokens = tokens - grant
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts', string.format('%.17g', now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 60000)
return {string.format('%.17g', grant), string.format('%.17g', tokens)}
"""

TICK_SECONDS = 0.02  # how often buckets are checked for a sync (leases last lease_seconds)
REGISTRY_SECONDS = 1.0  # how often this process renews its registry entry
REGISTRY_TTL_SECONDS = 5.0  # a process missing this long is no longer counted
RETRY_SECONDS = 1.0  # how often an unreachable Redis is tried again
# What a Redis that is down, slow, failing over or refusing us raises (a cluster that has lost a
# slot's primary raises RedisClusterException, which is no RedisError).
REDIS_FAILURES = (RedisError, RedisClusterException, OSError, TimeoutError)
# A tick's calls may each wait redis_timeout_seconds and be retried once by redis-py (a cluster
# follows a MOVED, a sentinel pool asks for the primary again): past this many timeouts, fallback.
TICK_TIMEOUTS = 3

RedisClient = aioredis.Redis | RedisCluster


def connect(config: ClusterConfig) -> RedisClient | None:
    """The client for the configured topology (None without Redis). Nothing is sent until used."""
    if not config.uses_redis:
        return None
    password = read_secret(config.redis_password_file)  # a URL's own user and password win over these
    options: dict[str, Any] = {
        "socket_timeout": config.redis_timeout_seconds,
        "socket_connect_timeout": config.redis_timeout_seconds,
        "username": config.redis_username or None,
        "password": password or None,
    }
    tls: dict[str, Any] = {"ssl_ca_certs": config.redis_tls_ca or None} if config.redis_tls else {}
    if config.redis_url:
        if config.redis_url.startswith("rediss://") and config.redis_tls_ca:
            options["ssl_ca_certs"] = config.redis_tls_ca
        return aioredis.Redis.from_url(config.redis_url, **options)
    if config.redis_cluster_nodes:
        nodes = [ClusterNode(host, port) for host, port in config.redis_cluster_nodes]
        return RedisCluster(startup_nodes=nodes, ssl=config.redis_tls, **tls, **options)
    sentinel_tls = {"ssl": True, **tls} if config.redis_tls else {}
    sentinel_password = read_secret(config.redis_sentinel_password_file)
    sentinel = Sentinel(
        list(config.redis_sentinels),
        sentinel_kwargs={
            "socket_timeout": config.redis_timeout_seconds,
            "socket_connect_timeout": config.redis_timeout_seconds,
            "password": sentinel_password or None,
            **sentinel_tls,
        },
        **sentinel_tls,
        **options,
    )
    return sentinel.master_for(config.redis_sentinel_service)


def read_secret(path: str) -> str:
    """A password file's one line; "" without a file. An empty file is no password (not AUTH "")."""
    return Path(path).read_text().strip() if path else ""


def describe(config: ClusterConfig) -> str:
    """The configured Redis for the logs (never a password: a URL's is masked)."""
    if config.redis_cluster_nodes:
        return "cluster " + ",".join(f"{host}:{port}" for host, port in config.redis_cluster_nodes)
    if config.redis_sentinels:
        sentinels = ",".join(f"{host}:{port}" for host, port in config.redis_sentinels)
        return f"primary {config.redis_sentinel_service!r} of sentinels {sentinels}"
    scheme, _, rest = config.redis_url.partition("://")
    credentials, at, address = rest.rpartition("@")
    return f"{scheme}://{credentials.partition(':')[0]}:***@{address}" if at else config.redis_url


class SharedQuotas:
    """Makes the engine's buckets (LeasedBucket) and keeps them in sync with Redis."""

    def __init__(
        self, config: ClusterConfig, processes: int, metrics: ProxyMetrics, clock: Callable[[], float]
    ) -> None:
        self.config = config
        self.clock = clock  # the loop's time(): the buckets' clock
        self.metrics = metrics
        self.processes = max(1, processes)  # N while Redis cannot tell
        # Weak: a bucket the engine drops as idle (QuotaEngine.expire_idle) and no session still
        # holds leaves this map too, so per-entity state stays bounded as in a single process.
        self.buckets: weakref.WeakValueDictionary[BucketId, LeasedBucket] = weakref.WeakValueDictionary()
        self.process_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.redis = connect(config)
        self.redis_name = describe(config)
        self.script_sha = ""  # loaded at each (re)connection: a restarted Redis has forgotten it
        self.connected: bool | None = None  # None: not tried yet
        metrics.cluster_processes.set(self.processes)

    @property
    def share(self) -> float:
        return 1.0 / self.processes

    def bucket(self, bucket_id: BucketId, rate: float, burst: float, now: float) -> Bucket:
        """The engine's bucket factory: a new bucket spends its credit until its first lease, or its
        1/N share while Redis is unreachable."""
        if self.connected:
            bucket = LeasedBucket.shared(rate, burst, self.share, self.config.lease_seconds, now)
        else:
            bucket = LeasedBucket.local(rate, burst, self.share, now)
        self.buckets[bucket_id] = bucket
        return bucket

    def _key(self, bucket_id: BucketId) -> str:
        name = json.dumps(bucket_id, separators=(",", ":"))
        # The hash tag (the first {...}) puts the key in a Redis Cluster slot of its own bucket's:
        # the buckets spread over the primaries; a name's own braces come after it and do not count.
        tag = hashlib.blake2b(name.encode(), digest_size=6).hexdigest()
        return f"{self.config.key_prefix}bucket:{{{tag}}}:{name}"

    # the task -------------------------------------------------------------------------------------
    async def run(self) -> None:
        if self.redis is None:
            log.info("quotas shared by %d processes without Redis: each enforces 1/%d", self.processes, self.processes)
            return
        next_registry = 0.0
        while True:
            stop_if_cancel_was_swallowed()  # a cancel lost inside a Redis call still stops it
            try:
                now_wall = time.monotonic()
                async with asyncio.timeout(self.config.redis_timeout_seconds * TICK_TIMEOUTS):
                    if not self.connected:
                        self.script_sha = await self.redis.script_load(LEASE_SCRIPT)
                    if now_wall >= next_registry:
                        await self._register()
                        next_registry = now_wall + REGISTRY_SECONDS
                        self._set_connected(True)
                    await self._sync()
            except Exception as exc:  # whatever failed, the task lives on to retry
                if not isinstance(exc, REDIS_FAILURES):
                    log.exception("the shared-quota sync failed unexpectedly; retrying as if Redis were down")
                self._set_connected(False, exc)
                next_registry = 0.0
                await asyncio.sleep(RETRY_SECONDS)
                continue
            await asyncio.sleep(TICK_SECONDS)

    async def close(self) -> None:
        """Gives every lease back and leaves the registry (best effort: Redis may be gone)."""
        if self.redis is None:
            return
        try:
            if self.connected:
                now = self.clock()
                leased = [(bucket_id, b) for bucket_id, b in self.buckets.items() if b.leased and b.held > 0]
                if leased:
                    pipe = self.redis.pipeline(transaction=False)
                    for bucket_id, bucket in leased:
                        spent = bucket.spent
                        self._call(pipe, bucket_id, bucket, LeaseRequest(bucket.held, spent, 0.0, spent))
                        bucket.go_local(self.share, now)
                    await asyncio.wait_for(pipe.execute(), self.config.redis_timeout_seconds * 2)
                    self.metrics.cluster_redis_calls_total.inc(len(leased))
                await asyncio.wait_for(
                    self.redis.zrem(self.config.key_prefix + "processes", self.process_id),
                    self.config.redis_timeout_seconds * 2,
                )
        except REDIS_FAILURES as exc:
            log.warning("could not give the leases back to Redis at shutdown: %s", exc)
        await self.redis.aclose()
        if isinstance(self.redis, aioredis.Redis) and isinstance(self.redis.connection_pool, SentinelConnectionPool):
            for sentinel in self.redis.connection_pool.sentinel_manager.sentinels:
                await sentinel.aclose()

    async def _register(self) -> None:
        assert self.redis is not None
        key = self.config.key_prefix + "processes"
        wall = time.time()
        pipe = self.redis.pipeline(transaction=True)
        pipe.zadd(key, {self.process_id: wall + REGISTRY_TTL_SECONDS})
        pipe.zremrangebyscore(key, "-inf", wall)
        pipe.zcard(key)
        pipe.expire(key, int(REGISTRY_TTL_SECONDS * 4))
        _, _, live, _ = await pipe.execute()
        self.metrics.cluster_redis_calls_total.inc(4)
        self.processes = max(1, int(live))
        self.metrics.cluster_processes.set(self.processes)

    async def _sync(self) -> None:
        assert self.redis is not None
        now = self.clock()
        lease_seconds = self.config.lease_seconds
        due = [(bucket_id, b) for bucket_id, b in self.buckets.items() if b.wants_sync(now, lease_seconds)]
        if not due:
            return
        requests = [bucket.lease_request(now, lease_seconds) for _bucket_id, bucket in due]
        answers = await self._execute(due, requests)
        now = self.clock()
        failed: BaseException | None = None
        for (_bucket_id, bucket), request, answer in zip(due, requests, answers, strict=True):
            if isinstance(answer, BaseException):
                failed = failed or answer
                continue
            grant, tokens = answer
            bucket.apply_grant(request, float(grant), float(tokens), now, lease_seconds)
        if failed is not None:  # the grants that came back are applied; the rest: fallback
            raise failed

    async def _execute(self, due: list[tuple[BucketId, LeasedBucket]], requests: list[LeaseRequest]) -> list[Any]:
        """One pipeline of script calls; an answer is an exception where that call failed. A node
        that has not seen the script (a replica promoted by a failover, a restarted node) answers
        NOSCRIPT without running it: the script is loaded on every primary and those calls resent."""
        assert self.redis is not None
        answers: list[Any] = [None] * len(due)
        pending = list(range(len(due)))
        for attempt in range(2):
            pipe = self.redis.pipeline(transaction=False)
            for index in pending:
                bucket_id, bucket = due[index]
                self._call(pipe, bucket_id, bucket, requests[index])
            results = await pipe.execute(raise_on_error=False)
            self.metrics.cluster_redis_calls_total.inc(len(pending))
            for index, result in zip(pending, results, strict=True):
                answers[index] = result
            pending = [index for index in pending if isinstance(answers[index], NoScriptError)]
            if not pending or attempt:
                break
            self.script_sha = await self.redis.script_load(LEASE_SCRIPT)
        return answers

    def _call(
        self, pipe: Pipeline | ClusterPipeline, bucket_id: BucketId, bucket: LeasedBucket, request: LeaseRequest
    ) -> None:
        # execute_command: redis-py's cluster pipeline refuses .evalsha() (for fear of NOSCRIPT, which
        # _execute handles), yet routes an EVALSHA by its key's slot.
        pipe.execute_command(
            "EVALSHA",
            self.script_sha,
            1,
            self._key(bucket_id),
            repr(bucket.rate),
            repr(bucket.burst),
            repr(request.held),
            repr(request.spent),
            repr(request.want),
        )

    def _set_connected(self, connected: bool, error: BaseException | None = None) -> None:
        if connected == self.connected:
            return
        if connected and self.connected is False:
            self.metrics.cluster_rejoins_total.inc()
        self.connected = connected
        self.metrics.cluster_fallback.set(0 if connected else 1)
        if connected:
            log.warning("Redis %s reachable: quotas shared by %d processes", self.redis_name, self.processes)
            return
        self.metrics.cluster_fallbacks_total.inc()
        now = self.clock()
        for bucket in self.buckets.values():
            bucket.go_local(self.share, now)
        log.warning(
            "Redis %s unreachable (%s): each process enforces 1/%d of every quota until it is back",
            self.redis_name,
            str(error or "") or "timed out",
            self.processes,
        )
