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


class RequestCollector:
    """v1: keeps every request's record, up to `limit` of them and `user_limit` of one user's, as one
    list per field: no object per record while they wait for the flush (records made as the flush
    reads them, off the loop)."""

    def __init__(self, limit: int, user_limit: int = -1) -> None:
        self.limit = limit
        self.user_limit = limit if user_limit < 0 else user_limit
        self._clear()

    def _clear(self) -> None:
        self._held: dict[str, int] = {}  # user -> records held (usage.buffer_records_per_user)
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
        held = self._held.get(user, 0)
        if held >= self.user_limit:
            return False
        self._held[user] = held + 1
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


def request_lines(
    columns: tuple[list, ...],
    proxy_id: str,
    writer: str,
    first_seq: int,
    quota_since: list[float],
    quota_suffix: Callable[[int, str, str, int], str],
) -> list[str]:
    """The v1 rows of a RequestCollector's `columns` as JSON lines, each exactly the text the sinks'
    encoder writes for its row (usage.RequestBatch.rows) with its quota fields, with no dict per row.
    The fields and their order are usage_fields.FIELDS' (the line is a generated section).

    Quotas: `quota_since[i]` is when the i-th quota state came into force (QuotasInForce's history)
    and `quota_suffix(i, user, client_id, api_key)` the text of its quota fields (',"quota_...}').
    What a row shares with others of its (quota state, user, client_id, api_key, api_version) is
    made once, and once per topic list and decision."""
    ts_col, user_col, client_id_col, api_key_col, api_version_col, topics_col = columns[:6]
    bytes_in_col, bytes_out_col, partitions_mutated_col, upstream_latency_ms_col, throttle_ms_col = columns[6:11]
    decision_col, shadow_throttle_ms_col, over_quota_col = columns[11:]
    proxy_text = json_text(proxy_id)
    writer_text = json_text(writer)
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
        client_id = client_id_col[i]
        api_key = api_key_col[i]
        api_version = api_version_col[i]
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
                # generated by `make docs` from usage_fields.FIELDS: edit it, not this (v1 identity)
                identity = (
                    f',"user":{json_text(user)},"client_id":{json_text(client_id)},"api_key":'
                    f'{json_text(api_key)},"api_version":{json_text(api_version)}'
                )
                # end of the generated section (v1 identity)
                texts = heads[key] = (identity, quota_suffix(state, user, client_id, api_key) + "}")
            identity, tail = texts
            last_user, last_client_id, last_api_key, last_version, last_state = (
                user, client_id, api_key, api_version, state
            )  # fmt: skip
        topics = topics_col[i]
        if topics is not last_topics:
            topics_text = topics_texts.get(topics)
            if topics_text is None:
                topics_text = topics_texts[topics] = json_text(list(topics))
            last_topics = topics
        decision = decision_col[i]
        decision_text = decision_texts.get(decision)
        if decision_text is None:
            decision_text = decision_texts[decision] = json_text(decision)
        # generated by `make docs` from usage_fields.FIELDS: edit it, not this (v1 line)
        lines.append(
            f'{{"v":1,"ts":{ts},"proxy":{proxy_text},"writer":{writer_text},"seq":{int_text(first_seq + i)}'
            f'{identity},"topics":{topics_text},"bytes_in":{int_text(bytes_in_col[i])},"bytes_out":'
            f'{int_text(bytes_out_col[i])},"upstream_latency_ms":'
            f'{milliseconds_text(upstream_latency_ms_col[i])},"throttle_ms":{int_text(throttle_ms_col[i])}'
            f',"partitions_mutated":{int_text(partitions_mutated_col[i])},"decision":{decision_text}'
            f',"throttled_bytes":{int_text(bytes_in_col[i] if over_quota_col[i] else 0)},"shadow_throttle_ms":'
            f"{int_text(shadow_throttle_ms_col[i])}{tail}"
        )
        # end of the generated section (v1 line)
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


# generated by `make docs` from usage_fields.FIELDS: edit it, not this (counters)
class Counters:
    """One aggregate row's counters (AGGREGATE_COUNTERS, in order: `values`)."""

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
        self.throttled_bytes = 0.0
        self.first_ms = charged_ms
        self.last_ms = charged_ms
        self.charge_offset_ms = 0.0
        self.shadow_throttle_ms = 0

    def values(self) -> list:
        return [
            self.requests,
            self.bytes_in,
            self.bytes_out,
            self.request_time_ms,
            self.throttle_ms,
            self.throttle_ms_max,
            self.throttled_requests,
            self.refusals,
            self.partitions_mutated,
            self.throttled_bytes,
            self.first_ms,
            self.last_ms,
            self.charge_offset_ms,
            self.shadow_throttle_ms,
        ]

    def written(self) -> list:
        """values() as rows carry them: a double sum whole, or to the µs."""
        return [
            self.requests,
            round(self.bytes_in),
            self.bytes_out,
            round(self.request_time_ms, 3),
            self.throttle_ms,
            self.throttle_ms_max,
            self.throttled_requests,
            self.refusals,
            self.partitions_mutated,
            round(self.throttled_bytes),
            round(self.first_ms),
            round(self.last_ms),
            round(self.charge_offset_ms, 3),
            self.shadow_throttle_ms,
        ]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Counters) and self.values() == other.values()

    def __repr__(self) -> str:
        return f"Counters({self.values()})"


def aggregate_columns(items: list, interval_ms: int) -> tuple:
    """The columns of AggregateCollector.take_aggregates' items: ts, user, client_id, api_key, topic,
    and one list per counter in AGGREGATE_COUNTERS' order, valued as Counters.written writes them."""
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
    throttled_bytes = []
    first_ms = []
    last_ms = []
    charge_offset_ms = []
    shadow_throttle_ms = []
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
        throttled_bytes.append(round(counters.throttled_bytes))
        first_ms.append(round(counters.first_ms))
        last_ms.append(round(counters.last_ms))
        charge_offset_ms.append(round(counters.charge_offset_ms, 3))
        shadow_throttle_ms.append(counters.shadow_throttle_ms)
    return (
        ts,
        users,
        client_ids,
        api_keys,
        topics,
        [
            requests,
            bytes_in,
            bytes_out,
            request_time_ms,
            throttle_ms,
            throttle_ms_max,
            throttled_requests,
            refusals,
            partitions_mutated,
            throttled_bytes,
            first_ms,
            last_ms,
            charge_offset_ms,
            shadow_throttle_ms,
        ],
    )


# end of the generated section (counters)


class AggregateCollector:
    """v2: sums requests per (interval, user, client_id, api_key, topic), up to `limit` keys.

    A produce naming several topics splits its bytes_in evenly over them (the record does not carry
    per-topic sizes) and counts the request, its time, throttle and refusal on its first topic's
    row, so that sums over topics are exact."""

    def __init__(self, limit: int, interval_ms: int, topics_per_entity: int = 1000, user_limit: int = -1) -> None:
        self.limit = limit
        # One user's keys at most (usage.buffer_records_per_user): a tenant inventing client ids
        # fills its own share, not the buffer every other tenant's records need.
        self.user_limit = limit if user_limit < 0 else user_limit
        self._held: dict[str, int] = {}  # user -> keys held
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
                    held = self._held.get(user, 0)
                    if held >= self.user_limit:
                        return False
                    self._held[user] = held + 1
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
        self._held = {}
        self._last = None
        return requests, list(aggregates.items())


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
