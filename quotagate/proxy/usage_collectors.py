"""What the session core does with usage records per exchange: the two collectors (usage.py says
what they are for and how they are written out, off the hot path).

Compiled as usage_collectors_c (typed by usage_collectors_c.pxd), interpreted as it is:
quotagate/compiled.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

REQUEST_SCHEMA_VERSION = 1  # one record per request
AGGREGATE_SCHEMA_VERSION = 2  # one record per interval and key
PRODUCE = 0  # ApiKey.PRODUCE, the only API whose aggregates are kept per topic

Row = dict[str, Any]


class UsageRecord(NamedTuple):
    ts_ms: int  # wall-clock time of the response (of the request when none comes), epoch ms
    user: str
    client_id: str
    api_key: int
    api_version: int
    topics: tuple[str, ...]  # where cheap: produce and topic mutations
    bytes_in: int  # request size
    bytes_out: int  # response size (0 when none)
    partitions_mutated: int
    upstream_latency_ms: float  # −1 when the proxy answered itself
    throttle_ms: int
    decision: str  # ok | throttled | refused | partially_refused
    shadow_throttle_ms: int = 0  # the throttle shadow quotas would have added (never applied)
    # A produce whose charge to producer_byte_rate, when it was read, left its entity over quota.
    over_quota: bool = False


# The counters of one aggregate, in the order AggregateCollector keeps them in its lists.
AGGREGATE_COUNTERS = (
    "requests",
    "bytes_in",
    "bytes_out",
    "request_time_ms",  # upstream latency summed over the requests the broker answered
    "throttle_ms",  # summed over requests
    "throttle_ms_max",
    "throttled_requests",
    "refusals",  # requests refused whole or in part
    "partitions_mutated",
    "shadow_throttle_ms",  # what shadow quotas would have added, summed over requests (never applied)
    # Bytes of the produce requests whose charge left the entity over its producer_byte_rate: the
    # traffic the quota throttled (÷ the quota: the time the entity was held at it).
    "throttled_bytes",
    # When the row's requests were charged (a produce when read, others when answered), epoch ms:
    # the first, the last, and the sum of their offsets from the interval's start. A replay places
    # the requests with these (docs/pipeline.md).
    "first_ms",
    "last_ms",
    "charge_offset_ms",
)
# Written as floats (the others as int64).
FLOAT_COUNTERS = frozenset({"request_time_ms", "charge_offset_ms"})


def request_row(record: UsageRecord, proxy_id: str, writer: str, seq: int) -> Row:
    return {
        "v": REQUEST_SCHEMA_VERSION,
        "ts": record.ts_ms,
        "proxy": proxy_id,
        "writer": writer,
        "seq": seq,
        "user": record.user,
        "client_id": record.client_id,
        "api_key": record.api_key,
        "api_version": record.api_version,
        "topics": list(record.topics),
        "bytes_in": record.bytes_in,
        "bytes_out": record.bytes_out,
        "partitions_mutated": record.partitions_mutated,
        "upstream_latency_ms": round(record.upstream_latency_ms, 3),
        "throttle_ms": record.throttle_ms,
        "decision": record.decision,
        "shadow_throttle_ms": record.shadow_throttle_ms,
        "throttled_bytes": record.bytes_in if record.over_quota else 0,
    }


class RequestCollector:
    """v1: keeps every request's record, up to `limit` of them, as one list per field: no object per
    record while they wait for the flush (records made as the flush reads them, off the loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._clear()

    def _clear(self) -> None:
        self._ts_ms: list[int] = []
        self._user: list[str] = []
        self._client_id: list[str] = []
        self._api_key: list[int] = []
        self._api_version: list[int] = []
        self._topics: list[tuple[str, ...]] = []
        self._bytes_in: list[int] = []
        self._bytes_out: list[int] = []
        self._partitions_mutated: list[int] = []
        self._latency_ms: list[float] = []
        self._throttle_ms: list[int] = []
        self._decision: list[str] = []
        self._shadow_ms: list[int] = []
        self._over_quota: list[bool] = []

    def add(self, record: UsageRecord) -> bool:
        return self.add_exchange(*record)

    def add_exchange(
        self,
        ts_ms: int,
        user: str,
        client_id: str,
        api_key: int,
        api_version: int,
        topics: tuple[str, ...],
        bytes_in: int,
        bytes_out: int,
        partitions_mutated: int,
        latency_ms: float,
        throttle_ms: int,
        decision: str,
        shadow_ms: int,
        over_quota: bool,
    ) -> bool:
        """add() of the record these fields make (the session core's call: no record is made)."""
        if len(self._ts_ms) >= self.limit:
            return False
        self._ts_ms.append(ts_ms)
        self._user.append(user)
        self._client_id.append(client_id)
        self._api_key.append(api_key)
        self._api_version.append(api_version)
        self._topics.append(topics)
        self._bytes_in.append(bytes_in)
        self._bytes_out.append(bytes_out)
        self._partitions_mutated.append(partitions_mutated)
        self._latency_ms.append(latency_ms)
        self._throttle_ms.append(throttle_ms)
        self._decision.append(decision)
        self._shadow_ms.append(shadow_ms)
        self._over_quota.append(over_quota)
        return True

    def __len__(self) -> int:
        return len(self._ts_ms)

    @property
    def buffer(self) -> list[UsageRecord]:
        """The records kept, in order."""
        return [UsageRecord._make(fields) for fields in zip(*self._columns(), strict=True)]

    def _columns(self) -> tuple[list, ...]:
        return (
            self._ts_ms, self._user, self._client_id, self._api_key, self._api_version, self._topics,
            self._bytes_in, self._bytes_out, self._partitions_mutated, self._latency_ms, self._throttle_ms,
            self._decision, self._shadow_ms, self._over_quota,
        )  # fmt: skip

    def take(self, proxy_id: str, writer: str, first_seq: int) -> tuple[int, int, Callable[[], list[Row]]]:
        """Empties the collector; returns (requests, rows, a function making the rows off the loop)."""
        columns = self._columns()
        count = len(self)
        self._clear()

        def rows() -> list[Row]:
            return [
                request_row(UsageRecord._make(fields), proxy_id, writer, first_seq + i)
                for i, fields in enumerate(zip(*columns, strict=True))
            ]

        return count, count, rows


class Counters:
    """One aggregate row's counters (AGGREGATE_COUNTERS, in that order: `values`)."""

    def __init__(self, charged_ms: float) -> None:
        self.requests = 0
        self.bytes_in = 0.0
        self.bytes_out = 0
        self.request_time_ms = 0.0
        self.throttle_ms = 0
        self.throttle_ms_max = 0
        self.throttled_requests = 0
        self.refusals = 0
        self.partitions_mutated = 0
        self.shadow_throttle_ms = 0
        self.throttled_bytes = 0.0
        self.first_ms = charged_ms
        self.last_ms = charged_ms
        self.charge_offset_ms = 0.0

    def values(self) -> list:
        return [
            self.requests, self.bytes_in, self.bytes_out, self.request_time_ms, self.throttle_ms,
            self.throttle_ms_max, self.throttled_requests, self.refusals, self.partitions_mutated,
            self.shadow_throttle_ms, self.throttled_bytes, self.first_ms, self.last_ms, self.charge_offset_ms,
        ]  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Counters) and self.values() == other.values()

    def __repr__(self) -> str:
        return f"Counters({self.values()})"


class AggregateCollector:
    """v2: sums requests per (interval, user, client_id, api_key, topic), up to `limit` keys.

    A produce naming several topics splits its bytes_in evenly over them (the record does not carry
    per-topic sizes) and counts the request, its time, throttle and refusal on its first topic's
    row, so that sums over topics are exact."""

    def __init__(self, limit: int, interval_ms: int) -> None:
        self.limit = limit
        self.interval_ms = interval_ms
        self.aggregates: dict[tuple[int, str, str, int, str], Counters] = {}
        self.requests = 0
        # The last single-topic row added to, and its key's parts: a connection's next exchange
        # nearly always adds to it again (no key to build, hash and look up).
        self._last = None
        self._last_interval = -1
        self._last_user = ""
        self._last_client_id = ""
        self._last_api_key = -1
        self._last_topic = ""

    def add(self, record: UsageRecord) -> bool:
        return self.add_exchange(*record)

    def add_exchange(
        self,
        ts_ms: int,
        user: str,
        client_id: str,
        api_key: int,
        api_version: int,
        topics: tuple[str, ...],
        bytes_in: int,
        bytes_out: int,
        partitions_mutated: int,
        latency_ms: float,
        throttle_ms: int,
        decision: str,
        shadow_ms: int,
        over_quota: bool,
    ) -> bool:
        """Adds one exchange (a UsageRecord's fields) to its interval's rows; False when full."""
        # Counted in the interval in which it was charged: a produce when read, others when answered.
        charged_ms = ts_ms - latency_ms if api_key == PRODUCE and latency_ms > 0 else float(ts_ms)
        interval = int(charged_ms // self.interval_ms)
        if api_key != PRODUCE or not topics:
            topics = ("",)
        share = len(topics)
        bytes_in_share = bytes_in / share if share > 1 else float(bytes_in)
        throttled_bytes = bytes_in_share if over_quota else 0.0
        first = True
        for topic in topics:
            counters = self._last
            if not (
                counters is not None
                and share == 1
                and interval == self._last_interval
                and api_key == self._last_api_key
                and user is self._last_user
                and client_id is self._last_client_id
                and topic is self._last_topic
            ):
                key = (interval, user, client_id, api_key, topic)
                counters = self.aggregates.get(key)
                if counters is None:
                    if len(self.aggregates) >= self.limit:
                        return False
                    counters = self.aggregates[key] = Counters(charged_ms)
                if share == 1:
                    self._last = counters
                    self._last_interval = interval
                    self._last_user = user
                    self._last_client_id = client_id
                    self._last_api_key = api_key
                    self._last_topic = topic
            counters.bytes_in += bytes_in_share
            counters.throttled_bytes += throttled_bytes
            if first:
                first = False
                counters.requests += 1
                counters.bytes_out += bytes_out
                if latency_ms > 0:
                    counters.request_time_ms += latency_ms
                if throttle_ms > 0:
                    counters.throttle_ms += throttle_ms
                    counters.throttled_requests += 1
                    if throttle_ms > counters.throttle_ms_max:
                        counters.throttle_ms_max = throttle_ms
                if decision[0] in "rp":  # refused, partially_refused
                    counters.refusals += 1
                counters.partitions_mutated += partitions_mutated
                counters.shadow_throttle_ms += shadow_ms
                if charged_ms < counters.first_ms:
                    counters.first_ms = charged_ms
                elif charged_ms > counters.last_ms:
                    counters.last_ms = charged_ms
                counters.charge_offset_ms += charged_ms - interval * self.interval_ms
        self.requests += 1
        return True

    def __len__(self) -> int:
        return self.requests

    def take(self, proxy_id: str, writer: str, first_seq: int) -> tuple[int, int, Callable[[], list[Row]]]:
        aggregates, requests = self.aggregates, self.requests
        self.aggregates, self.requests = {}, 0
        self._last = None
        interval_ms = self.interval_ms

        def rows() -> list[Row]:
            out = []
            for seq, ((interval, user, client_id, api_key, topic), counters) in enumerate(
                aggregates.items(), first_seq
            ):
                row: Row = {
                    "v": AGGREGATE_SCHEMA_VERSION,
                    "ts": interval * interval_ms,
                    "interval_ms": interval_ms,
                    "proxy": proxy_id,
                    "writer": writer,
                    "seq": seq,
                    "user": user,
                    "client_id": client_id,
                    "api_key": api_key,
                    "topic": topic,
                }
                row.update(zip(AGGREGATE_COUNTERS, counters.values(), strict=True))
                row["bytes_in"] = round(row["bytes_in"])
                row["throttled_bytes"] = round(row["throttled_bytes"])
                row["request_time_ms"] = round(row["request_time_ms"], 3)
                row["first_ms"] = round(row["first_ms"])
                row["last_ms"] = round(row["last_ms"])
                row["charge_offset_ms"] = round(row["charge_offset_ms"], 3)
                out.append(row)
            return out

        return requests, len(aggregates), rows
