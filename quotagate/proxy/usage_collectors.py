"""What the session core does with usage records per exchange: the two collectors (usage.py says
what they are for and how they are written out, off the hot path).

Compiled as usage_collectors_c (typed by usage_collectors_c.pxd), interpreted as it is:
quotagate/compiled.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from quotagate.quotas.apis import PRODUCE  # the only API whose aggregates are kept per topic (TOPIC_NAMES)

REQUEST_SCHEMA_VERSION = 1  # one record per request
AGGREGATE_SCHEMA_VERSION = 2  # one record per interval and key

# The topic of the row that sums an entity's produce topics beyond usage.topics_per_entity in an
# interval (and names longer than Kafka's TOPIC_NAME_MAX): not a name Kafka accepts for a topic.
OTHER_TOPICS = "<other topics>"
TOPIC_NAME_MAX = 249  # Kafka's limit on a topic name (Topic.MAX_NAME_LENGTH)

Row = dict[str, Any]
# The JSON text of one value as the sinks' encoder writes it (json.dumps, no spaces): made once.
json_text = json.JSONEncoder(separators=(",", ":")).encode


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
    shadow_throttle_ms: int = 0  # the time shadow quotas would have held the entity at their rate (never applied)
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
    "shadow_throttle_ms",  # the time shadow quotas would have held the entity, summed (never applied)
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

    def take_columns(self) -> tuple[list, ...]:
        """Empties the collector; returns its columns (UsageRecord's fields, in its order)."""
        columns = self._columns()
        self._clear()
        return columns

    def take(self, proxy_id: str, writer: str, first_seq: int) -> tuple[int, int, Callable[[], list[Row]]]:
        """Empties the collector; returns (requests, rows, a function making the rows off the loop)."""
        count = len(self)
        columns = self.take_columns()

        def rows() -> list[Row]:
            return [
                request_row(UsageRecord._make(fields), proxy_id, writer, first_seq + i)
                for i, fields in enumerate(zip(*columns, strict=True))
            ]

        return count, count, rows


def request_lines(
    columns: tuple[list, ...],
    proxy_id: str,
    writer: str,
    first_seq: int,
    quota_since: list[float],
    quota_suffix: Callable[[int, str, str, int], str],
) -> list[str]:
    """The v1 rows of a RequestCollector's `columns` as JSON lines, each exactly the text of
    request_row(...) with its quota fields, as the sinks' encoder writes it, with no dict per row.

    Quotas: `quota_since[i]` is when the i-th quota state came into force (QuotasInForce's history)
    and `quota_suffix(i, user, client_id, api_key)` the text of its quota fields (',"quota_...}').
    What a row shares with others of its (quota state, user, client_id, api_key, api_version) is
    made once, and once per topic list."""
    ts_col, user_col, client_col, api_key_col, version_col, topics_col = columns[:6]
    bytes_in_col, bytes_out_col, partitions_col, latency_col, throttle_col = columns[6:11]
    decision_col, shadow_col, over_quota_col = columns[11:]
    start = '{"v":' + str(REQUEST_SCHEMA_VERSION) + ',"ts":'
    after_ts = ',"proxy":' + json_text(proxy_id) + ',"writer":' + json_text(writer) + ',"seq":'
    states = len(quota_since)
    heads: dict[tuple, tuple[str, str]] = {}  # (state, user, client_id, api_key, api_version) -> texts
    topics_texts: dict[tuple[str, ...], str] = {}
    decision_texts: dict[str, str] = {}
    lines = []
    last_user = last_client_id = last_topics = None
    last_api_key = last_version = last_state = -1
    identity = tail = topics_text = ""
    for i in range(len(ts_col)):
        ts = ts_col[i]
        user = user_col[i]
        client_id = client_col[i]
        api_key = api_key_col[i]
        api_version = version_col[i]
        state = states - 1
        while state > 0 and quota_since[state] > ts:  # QuotasInForce.state_at: the last in force at ts
            state -= 1
        if not (
            user is last_user
            and client_id is last_client_id
            and api_key == last_api_key
            and api_version == last_version
            and state == last_state
        ):
            key = (state, user, client_id, api_key, api_version)
            texts = heads.get(key)
            if texts is None:
                identity = (
                    f',"user":{json_text(user)},"client_id":{json_text(client_id)},"api_key":{json_text(api_key)}'
                    f',"api_version":{json_text(api_version)},"topics":'
                )
                texts = heads[key] = (identity, quota_suffix(state, user, client_id, api_key) + "}")
            identity, tail = texts
            last_user, last_client_id, last_api_key, last_version, last_state = (
                user, client_id, api_key, api_version, state
            )  # fmt: skip
        topics = topics_col[i]
        if topics is not last_topics:
            topics_text = topics_texts.get(topics)
            if topics_text is None:
                topics_text = topics_texts[topics] = json_text(list(topics)) + ',"bytes_in":'
            last_topics = topics
        decision = decision_col[i]
        decision_text = decision_texts.get(decision)  # with the names around it: fewer pieces to join
        if decision_text is None:
            decision_text = decision_texts[decision] = f',"decision":{json_text(decision)},"shadow_throttle_ms":'
        bytes_in = bytes_in_col[i]
        bytes_out = bytes_out_col[i]
        partitions = partitions_col[i]
        throttle = throttle_col[i]
        shadow = shadow_col[i]
        throttled_bytes = bytes_in if over_quota_col[i] else 0
        lines.append(
            f"{start}{ts}{after_ts}{int_text(first_seq + i)}{identity}{topics_text}"
            f'{int_text(bytes_in)},"bytes_out":{int_text(bytes_out)},'
            f'"partitions_mutated":{int_text(partitions)},"upstream_latency_ms":{milliseconds_text(latency_col[i])},'
            f'"throttle_ms":{int_text(throttle)}{decision_text}{int_text(shadow)},'
            f'"throttled_bytes":{int_text(throttled_bytes)}{tail}'
        )
    return lines


SMALL_INT_TEXTS = tuple(str(n) for n in range(1000))


def int_text(value: int) -> str:
    """str(value) (the encoder's text of an int), not made again for the small ones most fields hold."""
    return SMALL_INT_TEXTS[value] if 0 <= value < 1000 else f"{value}"  # compiled: no int object made


# The text of a fraction of a millisecond (0 to 999 µs) as repr() ends a float rounded to it.
FRACTION_TEXTS = tuple(f"{us:03d}".rstrip("0") or "0" for us in range(1000))


def milliseconds_text(value: float) -> str:
    """The encoder's text of round(value, 3), as request_row writes upstream_latency_ms.

    round() goes through decimal text and back, and repr() through it again; for a latency (above 0,
    below 10⁶ ms) this makes the same digits from the value scaled to µs, unless that lies within
    10⁻⁶ of a tie, where the scaling's error (≤ 6·10⁻⁸ µs there) could pick the other side."""
    if type(value) is float:
        ms = value
        if 0.0 < ms < 1e6:
            scaled = ms * 1000.0
            whole = scaled // 1.0
            fraction = scaled - whole
            if not (0.499999 <= fraction <= 0.500001):
                us = int(whole) + (1 if fraction > 0.5 else 0)
                return f"{int_text(us // 1000)}.{FRACTION_TEXTS[us % 1000]}"
        elif ms == -1.0:  # the proxy answered itself
            return "-1.0"
    rounded = round(value, 3)
    finite = rounded
    # repr() is the encoder's text for a finite float (and an int); it spells the others its way
    return repr(rounded) if finite - finite == 0 else json_text(rounded)


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

    def written(self) -> list:
        """values() as rows carry them: sizes and times whole, the two float sums to the µs."""
        return [
            self.requests, round(self.bytes_in), self.bytes_out, round(self.request_time_ms, 3), self.throttle_ms,
            self.throttle_ms_max, self.throttled_requests, self.refusals, self.partitions_mutated,
            self.shadow_throttle_ms, round(self.throttled_bytes), round(self.first_ms), round(self.last_ms),
            round(self.charge_offset_ms, 3),
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

    def __init__(self, limit: int, interval_ms: int, topics_per_entity: int = 1000) -> None:
        self.limit = limit
        self.interval_ms = interval_ms
        self.topics_per_entity = topics_per_entity
        self.aggregates: dict[tuple[int, str, str, int, str], Counters] = {}
        self.requests = 0
        # Produce topics with a row of their own, per (interval, user, client_id): past
        # topics_per_entity, the others go to the OTHER_TOPICS row, whatever names a client invents.
        self._topics_named: dict[tuple[int, str, str], int] = {}
        self.topics_folded = 0  # topics of requests counted under OTHER_TOPICS, since the collector began
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
                folded = False
                if counters is None and api_key == PRODUCE and len(topic) > 0:  # a topic new to the interval
                    entity = (interval, user, client_id)
                    named = self._topics_named.get(entity, 0)
                    if named >= self.topics_per_entity or len(topic) > TOPIC_NAME_MAX:
                        folded = True
                        self.topics_folded += 1
                        key = (interval, user, client_id, api_key, OTHER_TOPICS)
                        counters = self.aggregates.get(key)
                    else:
                        self._topics_named[entity] = named + 1
                if counters is None:
                    if len(self.aggregates) >= self.limit:
                        return False
                    counters = self.aggregates[key] = Counters(charged_ms)
                if share == 1 and not folded:  # a folded topic is looked up (and counted) again
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

    def take_aggregates(self) -> tuple[int, list]:
        """Empties the collector: (requests, [((interval, user, client_id, api_key, topic), Counters)])."""
        aggregates, requests = self.aggregates, self.requests
        self.aggregates, self.requests = {}, 0
        self._topics_named = {}
        self._last = None
        return requests, list(aggregates.items())

    def take(self, proxy_id: str, writer: str, first_seq: int) -> tuple[int, int, Callable[[], list[Row]]]:
        """Empties the collector; returns (requests, rows, a function making the rows)."""
        requests, items = self.take_aggregates()
        interval_ms = self.interval_ms
        return requests, len(items), lambda: aggregate_rows(items, proxy_id, writer, first_seq, interval_ms)


def aggregate_rows(items: list, proxy_id: str, writer: str, first_seq: int, interval_ms: int) -> list[Row]:
    """The v2 rows of AggregateCollector.take_aggregates' items, without their quota fields."""
    out = []
    for seq, ((interval, user, client_id, api_key, topic), counters) in enumerate(items, first_seq):
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
        row.update(zip(AGGREGATE_COUNTERS, counters.written(), strict=True))
        out.append(row)
    return out


def aggregate_columns(items: list, interval_ms: int) -> tuple:
    """The columns of the same rows, for Arrow: ts, user, client_id, api_key, topic, and one list per
    counter in AGGREGATE_COUNTERS' order, valued as aggregate_rows writes them (Counters.written)."""
    ts = []
    users = []
    client_ids = []
    api_keys = []
    topics = []
    requests = []
    bytes_in = []
    bytes_out = []
    request_time_ms = []
    throttle_ms = []
    throttle_ms_max = []
    throttled_requests = []
    refusals = []
    partitions_mutated = []
    shadow_throttle_ms = []
    throttled_bytes = []
    first_ms = []
    last_ms = []
    charge_offset_ms = []
    for (interval, user, client_id, api_key, topic), counters in items:
        ts.append(interval * interval_ms)
        users.append(user)
        client_ids.append(client_id)
        api_keys.append(api_key)
        topics.append(topic)
        requests.append(counters.requests)
        bytes_in.append(round(counters.bytes_in))
        bytes_out.append(counters.bytes_out)
        request_time_ms.append(round(counters.request_time_ms, 3))
        throttle_ms.append(counters.throttle_ms)
        throttle_ms_max.append(counters.throttle_ms_max)
        throttled_requests.append(counters.throttled_requests)
        refusals.append(counters.refusals)
        partitions_mutated.append(counters.partitions_mutated)
        shadow_throttle_ms.append(counters.shadow_throttle_ms)
        throttled_bytes.append(round(counters.throttled_bytes))
        first_ms.append(round(counters.first_ms))
        last_ms.append(round(counters.last_ms))
        charge_offset_ms.append(round(counters.charge_offset_ms, 3))
    counter_columns = [
        requests, bytes_in, bytes_out, request_time_ms, throttle_ms, throttle_ms_max, throttled_requests, refusals,
        partitions_mutated, shadow_throttle_ms, throttled_bytes, first_ms, last_ms, charge_offset_ms,
    ]  # fmt: skip
    return ts, users, client_ids, api_keys, topics, counter_columns


def quota_groups(at_ms: list, users: list, client_ids: list, api_keys: list, quota_since: list) -> tuple:
    """Rows by what names their quota fields: (group of each row, [(quota state, user, client_id,
    api_key)] of each group), the state the last of `quota_since` (QuotasInForce's history) in force
    at the row's `at_ms`, as QuotasInForce.state_at finds it."""
    states = len(quota_since)
    groups = {}
    keys = []
    group_of_row = []
    for i in range(len(at_ms)):
        at = at_ms[i]
        state = states - 1
        while state > 0 and quota_since[state] > at:
            state -= 1
        key = (state, users[i], client_ids[i], api_keys[i])
        group = groups.get(key)
        if group is None:
            group = groups[key] = len(keys)
            keys.append(key)
        group_of_row.append(group)
    return group_of_row, keys
