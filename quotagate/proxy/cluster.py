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
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid
import weakref
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from quotagate.config.settings import ClusterConfig
from quotagate.proxy.metrics import ProxyMetrics
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
        self.redis = (
            aioredis.Redis.from_url(
                config.redis_url,
                socket_timeout=config.redis_timeout_seconds,
                socket_connect_timeout=config.redis_timeout_seconds,
            )
            if config.redis_url
            else None
        )
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
        return self.config.key_prefix + "bucket:" + json.dumps(bucket_id, separators=(",", ":"))

    # the task -------------------------------------------------------------------------------------
    async def run(self) -> None:
        if self.redis is None:
            log.info("quotas shared by %d processes without Redis: each enforces 1/%d", self.processes, self.processes)
            return
        next_registry = 0.0
        while True:
            try:
                now_wall = time.monotonic()
                if not self.connected:
                    self.script_sha = await self.redis.script_load(LEASE_SCRIPT)
                if now_wall >= next_registry:
                    await self._register()
                    next_registry = now_wall + REGISTRY_SECONDS
                    self._set_connected(True)
                await self._sync()
            except (RedisError, OSError, TimeoutError) as exc:
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
                await self.redis.zrem(self.config.key_prefix + "processes", self.process_id)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("could not give the leases back to Redis at shutdown: %s", exc)
        await self.redis.aclose()

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
        pipe = self.redis.pipeline(transaction=False)
        requests = []
        for bucket_id, bucket in due:
            request = bucket.lease_request(now, lease_seconds)
            requests.append(request)
            self._call(pipe, bucket_id, bucket, request)
        answers = await pipe.execute()
        self.metrics.cluster_redis_calls_total.inc(len(due))
        now = self.clock()
        for (_bucket_id, bucket), request, (grant, tokens) in zip(due, requests, answers, strict=True):
            bucket.apply_grant(request, float(grant), float(tokens), now, lease_seconds)

    def _call(self, pipe: Pipeline, bucket_id: BucketId, bucket: LeasedBucket, request: LeaseRequest) -> None:
        pipe.evalsha(
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
        self.connected = connected
        self.metrics.cluster_fallback.set(0 if connected else 1)
        if connected:
            log.warning("Redis %s reachable: quotas shared by %d processes", self.config.redis_url, self.processes)
            return
        now = self.clock()
        for bucket in self.buckets.values():
            bucket.go_local(self.share, now)
        log.warning(
            "Redis %s unreachable (%s): each process enforces 1/%d of every quota until it is back",
            self.config.redis_url,
            error,
            self.processes,
        )
