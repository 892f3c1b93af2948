"""whatif: each entity's recorded series replayed against candidate quotas.

The replay runs the proxy's own quota engine (quotagate.quotas) inside applyInArrow, one entity (or
one tenant with its members) per group, so there is one definition of a token bucket and of how a
member's quotas compose: each candidate gets a QuotaEngine, and the loop charges the bucket that
engine gives the entity. Each request is charged as the proxy charges
it: a produce (and a mutation) when read, with the throttle its response carries read from the
bucket when the response goes back; a fetch and request time when the response is back.

Where the requests go in time:
- a v1 record is one request, charged at its read (`ts` less its upstream latency) or response;
- a v2 aggregate of n requests says when they were charged: its first, its last, and their mean
  (first_ms, last_ms, charge_offset_ms). The replay charges it in min(n, SLICES) equal slices
  placed to match the three: when the mean is early, some slices at `first` (the rush of a client
  spending its burst) and the rest evenly up to `last` (the pace a quota holds it at); otherwise
  evenly from first to last. Aggregates written before those columns are spread over the interval.

What it answers, per entity, quota key and candidate: active seconds, seconds throttled and their
share, total and p99 added delay per request (the throttle_time_ms the responses would carry), and
the amount charged over quota (`amount_delayed`: bytes for byte rates, of the requests whose charge
left the entity in debt) with `throttled_time_ms`, that amount at the candidate rate: how long the
quota held the entity at it. The last is what the records reproduce best (docs/pipeline.md: a
summed throttle_time_ms or the time in debt turn on when, within the second, each request came
back from its mute, which an aggregate does not keep). Rates (peak_second, mean_rate) are in the
key's quota unit: request_percentage in percent of one thread (1 % = 10 ms of request time a
second). Beside it, Kafka's sampled-rate rule
(quotagate.quotas.sampled_rate) on the same charges and quota. Candidates come from a table
(quota_key, quota[, user, client_id]) or, by default, a grid around each entity's peak second; the
quota the entity actually had is always one of them (`is_current`).

The current quota is what the records say was in force (their `quota_<key>` fields: the proxy's
file and Admin API quotas alike), the last one recorded, with every change in `quota_history`;
a table of quotas (the proxy's --config) stands in only for entities whose records do not say. At
the current quota the row also carries what the proxy recorded (throttle, seconds throttled,
bytes held at the quota) and, for a shadow quota, what it observed it would have done.

Tenants: a tenant's members (the records' `tenant`) are replayed together, one group per tenant,
as the proxy holds them: every member's charges, in one time order, go to the bucket the proxy
charges for it, its own entity quota's and the tenant's at once (quotas/token_bucket.py's MemberBucket,
from one QuotaEngine holding both; the throttle the larger). The tenant's rows try its candidates
with every member's own quota as the records name it; a member's rows (its user and client id, no
tenant, as an entity's) try its own candidates with the tenant's quota as the records name it
(`tenant_quota_<key>`, and whether shadow: `tenant_quota_<key>_shadow`; records written before that
flag leave the tenant's `current_shadow` null). A row with a null `quota` is the other side's
quota alone: for a member without an own quota it is what the proxy did (`is_current`), and it is
the throttle no candidate can lift, which recommend measures candidates from. A tenant's rows have
`tenant` set, no user or client id, and `members`, how many entities the tenant had. An entity whose
records put it in more than one tenant, or in one and in none (a reload moved it), is replayed
alone, as an entity in no tenant, while its charges still count for the tenants it was in.
docs/pipeline.md, "Tenants".
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from quotagate.pipeline.rollup import tenant_of
from quotagate.pipeline.schema import WINDOW_COLUMNS
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.apis import (
    BYTES_IN,
    BYTES_OUT,
    CHARGED_AT_READ,
    LONG_POLL,
    PARTITIONS_MUTATED,
    RECORDED_KEYS,
    apis_with,
)
from quotagate.quotas.engine import MS_PER_SECOND_PER_PERCENT, tokens_per_second
from quotagate.quotas.sampled_rate import SampledRate
from quotagate.quotas.tenants import Tenant, Tenants

SLICES = 16  # charges per v2 aggregate at most
KEYS = [k.value for k in RECORDED_KEYS]
GRID_STEPS = [2 ** (i / 4) for i in range(-16, 5)]  # 1/16 to 2 × the peak second, 19 % apart

RESULT_SCHEMA = (
    "user string, client_id string, tenant string, members long, quota_key string, quota double, active_seconds long, "
    "seconds_throttled long, throttled_share double, total_delay_ms double, p99_delay_ms double, "
    "amount_delayed double, throttled_time_ms double, kafka_seconds_throttled long, "
    "kafka_throttled_share double, kafka_total_delay_ms double, kafka_p99_delay_ms double, "
    "recorded_throttle_ms double, recorded_seconds_throttled long, recorded_amount_delayed double, "
    "peak_second double, mean_rate double, current_quota double, current_shadow boolean, "
    "current_source string, quota_history string, is_current boolean, recorded_shadow_throttle_ms double, "
    "recorded_shadow_seconds_throttled long, recorded_shadow_amount_delayed double"
)
RESULT_ARROW_SCHEMA = pa.schema(
    [
        (name, {"string": pa.string(), "double": pa.float64(), "long": pa.int64(), "boolean": pa.bool_()}[kind])
        for name, kind in (c.split(" ") for c in RESULT_SCHEMA.split(", "))
    ]
)


# Per quota key: the record column it charges.
AMOUNT_COLUMN = {
    QuotaKey.PRODUCER_BYTE_RATE: "bytes_in",
    QuotaKey.CONSUMER_BYTE_RATE: "bytes_out",
    QuotaKey.REQUEST_PERCENTAGE: "request_time_ms",
    QuotaKey.CONTROLLER_MUTATION_RATE: "partitions_mutated",
}


def record_columns(keys: list[str]) -> list[str]:
    """The record columns the replay of `keys` reads: every column sent to Python costs (10 M
    records: ~0.5 s each on local[2]), so only these. A column left out reads as NaN in `series`."""
    quota_keys = [QuotaKey(k) for k in keys]
    columns = ["ts", "interval_ms", "requests", "throttle_ms", "first_ms", "last_ms", "charge_offset_ms"]
    if len(quota_keys) > 1:
        columns.append("api_key")  # one key's records are picked out before (replay_input)
    if any(k in CHARGED_AT_READ for k in quota_keys):
        columns.append("request_time_ms")  # the upstream latency, back from the response's time
    if QuotaKey.PRODUCER_BYTE_RATE in quota_keys:
        columns.append("throttled_bytes")
    columns.append("shadow_throttle_ms")
    columns += [f"quota_{key.value}" for key in quota_keys]  # with its shadow flag: quota_code()
    return list(dict.fromkeys(columns + [AMOUNT_COLUMN[k] for k in quota_keys]))


def quota_code(key: str) -> Column:
    """The quota in force and its shadow flag as one number, one column less to send to Python:
    null where the records do not say, 0 when unlimited, the quota when binding, minus it when shadow
    (quotas are positive)."""
    value, shadow = F.col(f"quota_{key}"), F.col(f"quota_{key}_shadow")
    return _coded(shadow.isNull(), value, shadow).alias(f"quota_{key}")


def _coded(unknown: Column, value: Column, shadow: Column) -> Column:
    """(quota, shadow) as one number: null where `unknown`, 0 unlimited, minus the quota when shadow, the
    quota otherwise (a null shadow flag is no shadow: Spark's `when` takes null as false)."""
    return (F.when(unknown, F.lit(None)).when(value.isNull(), F.lit(0.0)).when(shadow, -value).otherwise(value)).cast(
        "double"
    )


# Per quota key, the records that count for it: (API keys, whether it is all but those), from the
# proxy's table of APIs (quotas/apis.py).
COUNTED_APIS = {
    QuotaKey.PRODUCER_BYTE_RATE: (apis_with(BYTES_IN), False),
    QuotaKey.CONSUMER_BYTE_RATE: (apis_with(BYTES_OUT), False),
    # a (share) fetch's long-poll wait cannot be told from its work in the records: fetches are left out
    QuotaKey.REQUEST_PERCENTAGE: (apis_with(LONG_POLL), True),
    QuotaKey.CONTROLLER_MUTATION_RATE: (apis_with(PARTITIONS_MUTATED), False),
}


def counted(key: QuotaKey, api_key: np.ndarray) -> np.ndarray:
    """Which records (by API key) count for `key`."""
    apis, all_but = COUNTED_APIS[key]
    return np.isin(api_key, apis) != all_but


def tenant_quota_code(table: DataFrame, key: str) -> Column:
    """quota_code for the tenant's quota (`tenant_quota_<key>`, `tenant_quota_<key>_shadow`), as the
    column `tenant_quota_<key>`: null where the records name no tenant (or predate the field), 0 when
    the tenant has no quota for the key, minus the quota when shadow, the quota otherwise: records
    written before the shadow flag as binding (Owners.tenant_flags says which tenants' records carry it)."""
    value, shadow = (F.col(name) if name in table.columns else F.lit(None) for name in _tenant_columns(key))
    return _coded(tenant_of(table).isNull(), value, shadow.cast("boolean")).alias(f"tenant_quota_{key}")


def _tenant_columns(key: str) -> tuple[str, str]:
    return f"tenant_quota_{key}", f"tenant_quota_{key}_shadow"


def replay_input(table: DataFrame, keys: list[str], by_tenant: bool = False) -> DataFrame:
    """The records the replay of `keys` reads, narrowed to the columns it needs: per entity, or
    (`by_tenant`) the records naming a tenant, each member's rows as they are (its own quota in the
    `quota_<key>` columns), with the tenant's quota in `tenant_quota_<key>`.

    A v1 record is one request, its topics' rows together: `request` names it (a hash of writer and
    seq; 0 for a v2 row) so that the replay merges those rows and no others, even two requests in
    the same ms. Merging happens per entity in the replay, not in a Spark aggregation: that would
    shuffle every request once more. A tenant's group holds its members' rows apart (each member
    charges its own bucket beside the tenant's): what it holds grows with its members, as the
    proxy's work for them does."""
    selected = []
    for key in keys:
        apis, all_but = COUNTED_APIS[QuotaKey(key)]
        selected.append(~F.col("api_key").isin(*apis) if all_but else F.col("api_key").isin(*apis))
    request = F.when(F.col("interval_ms") == 0, F.xxhash64("writer", "seq")).otherwise(F.lit(0)).alias("request")
    codes = {f"quota_{key}": key for key in keys}
    columns = [quota_code(codes[c]) if c in codes else F.col(c) for c in record_columns(keys)]
    if by_tenant:
        columns += [tenant_quota_code(table, key) for key in keys]
    owner = ["tenant", "user", "client_id"] if by_tenant else ["user", "client_id"]
    rows = table.where(tenant_of(table).isNotNull()) if by_tenant else table
    narrowed = rows.select(*owner, *columns, request)
    return narrowed.where(functools.reduce(lambda a, b: a | b, selected)) if selected else narrowed


def series(records: pa.Table, key: QuotaKey) -> dict[str, np.ndarray] | None:
    """One entity's records (rows of `replay_input`) → its series for `key`, one entry per v1 request
    or v2 aggregate that counts for it, in record order: ts, interval, n (requests), a (amount),
    t (recorded throttle ms), l (request time ms), b (throttled bytes), f and g (first and last
    charge ms), o (summed charge offsets ms), w (shadow throttle ms), q (the quota in force: NaN when
    unlimited or not recorded) and s (1 if it was shadow, 0 if not, NaN where not recorded), and p and
    r the same of the tenant's quota (`tenant_quota_<key>`; NaN where the records do not carry it). b,
    f, g, o are NaN where the records do not carry them (v1, older v2). None when nothing counts."""
    names = set(records.column_names)
    rows = counted(key, _numbers(records, "api_key")) if "api_key" in names else np.ones(records.num_rows, bool)
    if not rows.any():
        return None

    def column(name: str) -> np.ndarray:
        return _numbers(records, name, float)[rows] if name in names else np.full(int(rows.sum()), np.nan)

    ts, interval, request = (_numbers(records, name)[rows] for name in ("ts", "interval_ms", "request"))
    order = np.lexsort((request, interval, ts))
    ts, interval, request = ts[order], interval[order], request[order]
    sources = {"n": "requests", "a": AMOUNT_COLUMN[key], "t": "throttle_ms", "l": "request_time_ms"}
    sources |= {"b": "throttled_bytes", "f": "first_ms", "g": "last_ms", "o": "charge_offset_ms"}
    sources |= {"w": "shadow_throttle_ms", "q": f"quota_{key.value}", "p": f"tenant_quota_{key.value}"}
    values = {name: column(source)[order] for name, source in sources.items()}
    for quota, shadow in (("q", "s"), ("p", "r")):
        code = values[quota]  # quota_code(): NaN unknown, 0 unlimited, > 0 binding, < 0 shadow
        values[shadow] = np.where(np.isnan(code), np.nan, (code < 0).astype(float))
        values[quota] = np.where(code == 0, np.nan, np.abs(code))
    new = np.r_[True, (ts[1:] != ts[:-1]) | (interval[1:] != interval[:-1]) | (request[1:] != request[:-1])]
    if not new.all():  # rows of one request or aggregate: summed, a NaN only where all of them are
        starts = np.flatnonzero(new)
        for name in "ntlabow":
            values[name] = _sum_at(values[name], starts)
        values["f"] = np.fmin.reduceat(values["f"], starts)
        for name in "gqspr":  # the quotas: one value for an interval's rows (the fmax skips NaN)
            values[name] = np.fmax.reduceat(values[name], starts)
        ts, interval = ts[starts], interval[starts]
    return {"ts": ts.astype(float), "interval": interval.astype(float), **values}


def _numbers(records: pa.Table, name: str, dtype: type | None = None) -> np.ndarray:
    """A column as numbers, nulls as NaN (as float)."""
    column = records.column(name)
    if column.null_count:
        return column.to_numpy().astype(float)  # pyarrow gives floats with NaN for an integer column with nulls
    return column.to_numpy() if dtype is None else column.to_numpy().astype(dtype, copy=False)


def _sum_at(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Sums of values[starts[i]:starts[i + 1]], skipping NaN; NaN where all are."""
    present = ~np.isnan(values)
    sums = np.add.reduceat(np.where(present, values, 0.0), starts)
    return np.where(np.add.reduceat(present, starts) > 0, sums, np.nan)


def current_quota(
    owner_series: dict[str, np.ndarray], key: QuotaKey, stand_in: Callable[[QuotaKey], tuple[float, bool] | None] | None
) -> dict:
    """The quota an entity or tenant had for `key`: the last the records name (with every change), else
    what `stand_in` (the proxy's --config: key → (value, shadow), None when unlimited) gives, else
    unknown (source None)."""
    known = ~np.isnan(owner_series["s"])
    if known.any():
        ts, values, shadows = owner_series["ts"][known], owner_series["q"][known], owner_series["s"][known]
        changed = np.r_[
            True,
            ((values[1:] != values[:-1]) & ~(np.isnan(values[1:]) & np.isnan(values[:-1])))
            | (shadows[1:] != shadows[:-1]),
        ]
        history = [
            [int(at), None if np.isnan(value) else float(value), bool(shadow)]
            for at, value, shadow in zip(ts[changed], values[changed], shadows[changed], strict=True)
        ]
        value, shadow = history[-1][1], history[-1][2]
        return {
            "current_quota": value,
            "current_shadow": shadow,
            "current_source": "records",
            "quota_history": json.dumps(history),
        }
    if stand_in is None:
        return {"current_quota": None, "current_shadow": None, "current_source": None, "quota_history": None}
    found = stand_in(key)
    return {
        "current_quota": None if found is None else found[0],
        "current_shadow": found is not None and found[1],
        "current_source": "config",
        "quota_history": None,
    }


def entity_stand_in(table: QuotaTable | None, user: str, client_id: str) -> Callable | None:
    """current_quota's stand-in for an entity: what the --config's quotas resolve for it."""
    if table is None:
        return None

    def resolved(key: QuotaKey) -> tuple[float, bool] | None:
        resolution = table.resolve(user, client_id, key)
        return None if resolution is None else (resolution.value, resolution.shadow)

    return resolved


def _windows(row: dict) -> QuotaWindows:
    return QuotaWindows(
        int(row["quota_window_num"]),
        float(row["quota_window_size_seconds"]),
        int(row["controller_quota_window_num"]),
        float(row["controller_quota_window_size_seconds"]),
    )


@dataclass(frozen=True)
class Owners:
    """Who the records name, from one small job (four columns sent to every replay would cost more):
    per entity, the windows the proxy sized its bursts with, as its latest record carrying them says;
    per tenant the same over its members, how many members it had, and whether any of its records says
    whether its quotas were shadow (`tenant_flags`: those written before the flag do not); and the
    entities all of whose records name one tenant (`settled`: entity -> tenant), replayed with it."""

    entity_windows: dict[tuple[str, str], QuotaWindows]
    tenant_windows: dict[str, QuotaWindows]
    members: dict[str, int]
    tenant_flags: frozenset[str] = frozenset()
    settled: dict[tuple[str, str], str] = field(default_factory=dict)


def recorded_owners(table: DataFrame) -> Owners:
    names = [window.name for window in WINDOW_COLUMNS]
    carried = F.when(F.col("quota_window_num").isNotNull(), F.col("ts"))
    flags = [F.col(name).isNotNull() for name in (_tenant_columns(key)[1] for key in KEYS) if name in table.columns]
    flagged = functools.reduce(lambda a, b: a | b, flags) if flags else F.lit(False)
    rows = (
        table.groupBy("user", "client_id", tenant_of(table).alias("tenant"))
        .agg(
            F.max_by(F.struct(*names, F.col("ts").alias("at")), carried).alias("windows"),
            F.max(flagged).alias("flagged"),
        )
        .collect()
    )
    entity_windows: dict[tuple[str, str], tuple[int, QuotaWindows]] = {}
    tenant_windows: dict[str, tuple[int, QuotaWindows]] = {}
    members: dict[str, set[tuple[str, str]]] = {}
    tenant_flags: set[str] = set()
    tenants_of: dict[tuple[str, str], set[str | None]] = {}
    for row in rows:
        entity, tenant, latest = (row["user"], row["client_id"]), row["tenant"], row["windows"]
        tenants_of.setdefault(entity, set()).add(tenant)
        if tenant is not None:
            members.setdefault(tenant, set()).add(entity)
            if row["flagged"]:
                tenant_flags.add(tenant)
        if latest is None or latest["quota_window_num"] is None:
            continue
        found = (int(latest["at"]), _windows(latest.asDict()))
        for owners, owner in ((entity_windows, entity), (tenant_windows, tenant)):
            if owner is not None and (owner not in owners or owners[owner][0] < found[0]):
                owners[owner] = found
    return Owners(
        {entity: windows for entity, (_, windows) in entity_windows.items()},
        {tenant: windows for tenant, (_, windows) in tenant_windows.items()},
        {tenant: len(entities) for tenant, entities in members.items()},
        frozenset(tenant_flags),
        {entity: tenant for entity, (tenant, *more) in tenants_of.items() if tenant is not None and not more},
    )


def replay_entity(
    user: str,
    client_id: str,
    records: pa.Table,
    candidates: pd.DataFrame | None,
    windows: QuotaWindows,
    keys: list[str],
    stand_in: QuotaTable | None = None,
) -> pa.Table:
    """One entity's records (rows of `replay_input`) → one row per (quota key, candidate), the
    entity's charges against the candidate alone (an entity in no tenant: all it is held by).

    `stand_in`: the quotas for entities whose records do not say which quota was in force. `windows`:
    the proxy's, from the records (recorded_owners), else the --config's."""
    owner = {"user": user, "client_id": client_id, "tenant": None, "members": None}
    entity = (user, client_id)
    out = []
    for key_name in keys:
        key = QuotaKey(key_name)
        found = traffic(records, key)
        if found is None:
            continue
        current = current_quota(found.series, key, entity_stand_in(stand_in, user, client_id))
        for quota in _with_current(_candidates_for(candidates, user, client_id, key_name, found.peak), current):
            engine = replay_engine(key, windows, [entity], {entity: (quota, False)}, None)
            held = throttles(engine, key, [entity], np.zeros(len(found.charges["amount"]), np.int64), found.charges)
            out.append(_row(owner, key, quota, found, current, outcome(found.charges, key, quota, windows, *held)))
    return pa.Table.from_pylist(out, schema=RESULT_ARROW_SCHEMA)


def replay_tenant(
    tenant: str,
    members: int | None,
    records: pa.Table,
    candidates: pd.DataFrame | None,
    windows: QuotaWindows,
    keys: list[str],
    shadow_recorded: bool = True,
    stand_in: QuotaTable | None = None,
    settled: frozenset[tuple[str, str]] | None = None,
) -> pa.Table:
    """One tenant's records (rows of `replay_input(by_tenant=True)`: its members' apart) → its rows and
    its settled members' rows, one per (quota key, candidate). Every member's charges go, in time
    order, to the bucket the proxy charges for it: its own entity quota and the tenant's together
    (quotas/token_bucket.py's MemberBucket, from a QuotaEngine holding both), the throttle the larger.

    - The tenant's rows: each candidate tenant quota, with every member's own quota as its records say
      (else `stand_in`'s); the figures over all members' charges, the records' figures summed.
    - A settled member's rows (`settled`: the entities whose records all name this tenant; None:
      every member): each candidate own quota, with the tenant's quota as its records say; the
      figures over that member's charges.
    - A row with `quota` null where the other side has a binding quota in force: no quota on this
      side, the other's alone (the tenant's with the members' own quotas only; a member's with the
      tenant's quota only). For a member without an own quota it is what the proxy did (is_current).

    The tenant's bucket is charged every member's charges whatever the members' own quotas (the
    replay charges the traffic the records show), so the members' own candidates are replayed side
    by side: the j-th pass gives each member its j-th candidate, and each member's figures are
    those it would have with the others at any quota. The tenant's current quota is always the
    records' (a record naming a tenant names its quota: null when it has none), and so is whether it
    was shadow, unless no record says (`shadow_recorded` false: written before the flag): then
    `current_shadow` is null, for recommend's --config to say, and the replay takes it as binding."""
    owner = {"user": None, "client_id": None, "tenant": tenant, "members": members}
    parts = by_member(records)
    entities = [entity for entity, _ in parts]
    settled = frozenset(entities) if settled is None else settled
    out = []
    for key_name in keys:
        key = QuotaKey(key_name)
        found = [(entity, t) for entity, part in parts if (t := traffic(part, key)) is not None]
        if not found:
            continue
        joint, member = together([t for _, t in found], key)
        charges = joint.charges
        at = {entity: member == index for index, (entity, _) in enumerate(found)}
        replayed = [entity for entity, _ in found]
        own_current = {entity: current_quota(t.series, key, entity_stand_in(stand_in, *entity)) for entity, t in found}
        own = {entity: in_force(current) for entity, current in own_current.items()}
        tenant_series = {"ts": joint.series["ts"], "q": joint.series["p"], "s": joint.series["r"]}
        tenant_current = current_quota(tenant_series, key, None)
        if not shadow_recorded:
            tenant_current["current_shadow"] = None
        tenant_in_force = in_force(tenant_current)
        tenant_pair = None if tenant_in_force is None else (tenant, *tenant_in_force)
        # Each side's candidates, and None (no quota: what the other side holds anyway) when the
        # other side has a binding quota in force: recommend judges a candidate by what it adds.
        binding_own = any(pair is not None and not pair[1] for pair in own.values())
        tenant_quotas = _with_current(_tenant_candidates_for(candidates, tenant, key_name, joint.peak), tenant_current)
        for quota in [None] * binding_own + tenant_quotas:
            engine = replay_engine(key, windows, replayed, own, None if quota is None else (tenant, quota, False))
            held = throttles(engine, key, replayed, member, charges)
            out.append(_row(owner, key, quota, joint, tenant_current, outcome(charges, key, quota, windows, *held)))
        binding_tenant = tenant_in_force is not None and not tenant_in_force[1]
        lists = {
            entity: [None] * binding_tenant
            + _with_current(_candidates_for(candidates, *entity, key_name, t.peak), own_current[entity])
            for entity, t in found
            if entity in settled
        }
        for j in range(max((len(quotas) for quotas in lists.values()), default=0)):
            tried = {entity: quotas[j] for entity, quotas in lists.items() if j < len(quotas)}
            pairs = {entity: None if quota is None else (quota, False) for entity, quota in tried.items()}
            engine = replay_engine(key, windows, replayed, own | pairs, tenant_pair)
            held = throttles(engine, key, replayed, member, charges)
            for entity, t in found:
                if entity in tried:
                    quota, mask = tried[entity], at[entity]
                    result = outcome(_at(charges, mask), key, quota, windows, *_at(held, mask))
                    out.append(_row(_member(entity), key, quota, t, own_current[entity], result))
    return pa.Table.from_pylist(out, schema=RESULT_ARROW_SCHEMA)


def _member(entity: tuple[str, str]) -> dict:
    """A member's rows are an entity's: its user and client id, no tenant."""
    return {"user": entity[0], "client_id": entity[1], "tenant": None, "members": None}


def _at(arrays, mask: np.ndarray):
    """The entries of each array (a dict of them, or a tuple) where `mask`."""
    if isinstance(arrays, dict):
        return {name: values[mask] for name, values in arrays.items()}
    return tuple(values[mask] for values in arrays)


def quota_in_force(current: dict) -> float | None:
    """The value of the quota current_quota found, None when there is none (unknown or unlimited)."""
    value = current["current_quota"]
    return None if value is None or value <= 0 else float(value)


def in_force(current: dict) -> tuple[float, bool] | None:
    """The quota current_quota found, as the engine is given it: (value, shadow), None if none."""
    value = quota_in_force(current)
    return None if value is None else (value, bool(current["current_shadow"]))


def _with_current(quotas: list[float], current: dict) -> list[float]:
    """The candidates and the current quota, once each, in order."""
    value = quota_in_force(current)
    return sorted(set(quotas) if value is None else {*quotas, value})


def by_member(records: pa.Table) -> list[tuple[tuple[str, str], pa.Table]]:
    """A tenant's rows, split per member (user, client id): Arrow's dictionaries tell the names apart
    byte for byte (pandas' grouping would take "" and "\\0" for one)."""
    indices, names = [], []
    for column in ("user", "client_id"):
        encoded = records.column(column).combine_chunks().dictionary_encode()
        indices.append(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64))
        names.append(encoded.dictionary.to_pylist())
    width = max(len(names[1]), 1)
    codes, inverse = np.unique(indices[0] * width + indices[1], return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(codes) + 1))
    return [
        ((names[0][code // width], names[1][code % width]), records.take(pa.array(order[bounds[i] : bounds[i + 1]])))
        for i, code in enumerate(codes.tolist())
    ]


@dataclass(frozen=True)
class Traffic:
    """One owner's series for one key, ready to replay: `series` (every row, for the quota in force),
    `active` (the rows that charged something), their `charges`, and what the records say of them
    (`recorded`: the recorded throttle and amounts, the peak second and mean rate)."""

    series: dict[str, np.ndarray]
    active: dict[str, np.ndarray]
    charges: dict[str, np.ndarray]
    recorded: dict

    @property
    def peak(self) -> float:
        return self.recorded["peak_second"]


def traffic(records: pa.Table, key: QuotaKey) -> Traffic | None:
    """One owner's records → its Traffic for `key`; None when nothing was charged."""
    found = series(records, key)
    if found is None:
        return None
    active = (found["n"] > 0) & (found["a"] > 0)
    if not active.any():
        return None
    rows = {name: values[active] for name, values in found.items()}
    charges = charges_of(
        rows["ts"],
        rows["interval"],
        rows["n"],
        rows["a"],
        rows["l"] if key in CHARGED_AT_READ else np.zeros(len(rows["ts"])),
        rows["f"],
        rows["g"],
        rows["o"],
    )
    return Traffic(found, rows, charges, _recorded(rows, key))


def together(members: list[Traffic], key: QuotaKey) -> tuple[Traffic, np.ndarray]:
    """A tenant's Traffic from its members': their rows in one series (the records' figures over the
    members summed), their charges in one time order; and, per charge, which member (index) made it."""
    if len(members) == 1:
        return members[0], np.zeros(len(members[0].charges["amount"]), np.int64)

    def joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        order = np.argsort(np.concatenate([part["ts"] for part in parts]), kind="stable")
        return {name: np.concatenate([part[name] for part in parts])[order] for name in parts[0]}

    rows = joined([t.active for t in members])
    member = np.concatenate([np.full(len(t.charges["amount"]), i, np.int64) for i, t in enumerate(members)])
    order = np.argsort(np.concatenate([t.charges["charge_at"] for t in members]), kind="stable")
    charges = {name: np.concatenate([t.charges[name] for t in members])[order] for name in members[0].charges}
    return Traffic(joined([t.series for t in members]), rows, charges, _recorded(rows, key)), member[order]


def _recorded(rows: dict[str, np.ndarray], key: QuotaKey) -> dict:
    """What an owner's active rows say: the recorded throttle (summed, and the seconds it was in),
    bytes held at the quota, what a shadow quota observed; the peak second and the mean rate, in the
    key's quota unit (request time, ms a second, as percent of one thread)."""
    ts, amounts, recorded, throttled_bytes, shadow_throttle = (rows[name] for name in ("ts", "a", "t", "b", "w"))
    seconds = np.floor(ts / 1000).astype(np.int64)
    unit = MS_PER_SECOND_PER_PERCENT if key is QuotaKey.REQUEST_PERCENTAGE else 1.0
    per_second = np.bincount(seconds - seconds.min(), weights=amounts) / unit
    peak, span = float(per_second.max()), max(float(seconds.max() - seconds.min() + 1), 1.0)
    shadow_rows = np.nan_to_num(shadow_throttle) > 0
    delayed = key is QuotaKey.PRODUCER_BYTE_RATE and not np.isnan(throttled_bytes).all()
    return {
        "recorded_throttle_ms": float(recorded.sum()),
        "recorded_seconds_throttled": len(np.unique(seconds[recorded > 0])),
        "recorded_amount_delayed": float(np.nansum(throttled_bytes)) if delayed else None,
        "peak_second": peak,
        "mean_rate": float(amounts.sum()) / unit / span,
        "recorded_shadow_throttle_ms": float(np.nansum(shadow_throttle)),
        "recorded_shadow_seconds_throttled": len(np.unique(seconds[shadow_rows])),
        "recorded_shadow_amount_delayed": float(amounts[shadow_rows].sum()),
    }


def _row(owner: dict, key: QuotaKey, quota: float | None, found: Traffic, current: dict, result: dict) -> dict:
    return {
        **owner,
        "quota_key": key.value,
        "quota": quota,
        **result,
        **found.recorded,
        **current,
        # quota None: no quota for this owner, the other side's alone (replay_tenant)
        "is_current": quota == quota_in_force(current),
    }


def charges_of(
    ts: np.ndarray,
    intervals: np.ndarray,
    counts: np.ndarray,
    amounts: np.ndarray,
    latencies: np.ndarray,
    firsts: np.ndarray,
    lasts: np.ndarray,
    offsets: np.ndarray,
) -> dict[str, np.ndarray]:
    """Rows of a series → charges (module docstring): `charge_at` and `respond_at` (s), `amount`, and
    `weight` (requests each stands for), in order of charge time.

    latencies: summed upstream latency per row for keys charged at read, zeros otherwise."""
    slices = np.where(intervals > 0, np.minimum(counts, SLICES), 1).astype(np.int64)
    row = np.repeat(np.arange(len(ts)), slices)
    index = np.arange(len(row)) - np.repeat(np.cumsum(slices) - slices, slices)  # slice number within its row
    s = slices[row].astype(float)
    timed = ~np.isnan(firsts)
    # Rows that say when their requests were charged: a rush of `rush` slices at first, the rest
    # evenly to last, sized so the mean lands on the recorded one (no rush unless the mean is early).
    first, span = firsts, np.maximum(lasts - firsts, 0.0)
    mean = np.where(counts > 0, (ts + offsets / np.maximum(counts, 1) - first), 0.0)
    early = np.where(span > 0, mean / np.where(span > 0, span, 1.0), 0.5)
    evenly = np.where(early < 0.5, np.clip(np.rint(2 * np.minimum(counts, SLICES) * early - 1), 1, None), 0)
    evenly = np.minimum(evenly, np.maximum(slices - 1, 1))
    evenly = np.where(early < 0.5, evenly, np.maximum(slices - 1, 1))
    rush = slices - evenly
    step = np.where(evenly[row] > 0, (index - rush[row] + 1) / np.maximum(evenly[row], 1), 0.0)
    timed_at = first[row] + span[row] * np.where(index < rush[row], 0.0, step)
    # Rows without: v1 (one request, at `ts`, its response) and older v2 (spread over the interval,
    # at their responses).
    untimed_at = np.where(intervals[row] > 0, ts[row] + (index + 0.5) * intervals[row] / s, ts[row])
    latency = latencies[row] / counts[row]
    response_at = np.where(timed[row], timed_at + latency, untimed_at) / 1000
    charge_at = np.where(timed[row], timed_at, untimed_at - latency) / 1000
    order = np.argsort(charge_at, kind="stable")
    return {
        "charge_at": charge_at[order],
        "respond_at": response_at[order],
        "amount": (amounts[row] / s)[order],
        "weight": (counts[row] / s)[order],
    }


def replay_engine(
    key: QuotaKey,
    windows: QuotaWindows,
    entities: list[tuple[str, str]],
    own: dict[tuple[str, str], tuple[float, bool] | None],
    tenant: tuple[str, float, bool] | None,
) -> QuotaEngine:
    """A QuotaEngine holding, for `key`, each entity's own quota (`own`: (value, shadow); None or
    absent: none) and, when given, a tenant (name, value, shadow) whose members are `entities`: the
    buckets the proxy would charge for them (an entity's own alone, a member's own and its tenant's
    as one MemberBucket)."""
    quotas = {QuotaEntity(*entity): {key: pair[0]} for entity, pair in own.items() if pair is not None}
    shadow = frozenset(QuotaEntity(*entity) for entity, pair in own.items() if pair is not None and pair[1])
    tenants = None
    if tenant is not None:
        name, value, tried = tenant
        client_ids = tuple(dict.fromkeys(client_id for _, client_id in entities))
        tenants = Tenants((Tenant(name, client_ids=client_ids, quotas={key: value}, shadow=tried),))
    return QuotaEngine(QuotaTable(quotas, shadow, tenants=tenants), windows)


def throttles(
    engine: QuotaEngine, key: QuotaKey, entities: list[tuple[str, str]], member: np.ndarray, charges: dict
) -> tuple[np.ndarray, np.ndarray]:
    """Charges each charge (of entity `entities[member[i]]`) to the engine's buckets in time order, as
    the proxy charges it; returns per charge the throttle it called for and the throttle its response
    carried.

    For keys charged when read: the response carries the throttle as it stands when it goes back,
    after the charges read meanwhile (at equal times the charge comes first). A bucket only refills
    between charges, so a response is asked only when it may carry one: when the last charge before
    it (any member's: the tenant's bucket is theirs together) or its entity's own last charge called
    for a throttle. The responses that follow charge i (and precede charge i + 1) are
    by_time[after[i]:after[i + 1]]."""
    charge_at, respond_at, amounts = (charges[k] for k in ("charge_at", "respond_at", "amount"))
    calls = [_bucket_calls(engine, key, user, client_id, float(charge_at[0])) for user, client_id in entities]
    amount_list, charge_list = amounts.tolist(), charge_at.tolist()
    if len(calls) == 1:
        charged_by = map(calls[0][0], amount_list, charge_list)
    else:
        charge_fns = [charge for charge, _ in calls]
        charged_by = (charge_fns[m](a, at) for m, a, at in zip(member.tolist(), amount_list, charge_list, strict=True))
    n = len(amounts)
    if key not in CHARGED_AT_READ:
        charged = np.fromiter(charged_by, dtype=float, count=n)
        return charged, charged
    by_time = np.argsort(respond_at, kind="stable")
    last_charge = np.searchsorted(charge_at, respond_at[by_time], side="right") - 1
    after = np.searchsorted(last_charge, np.arange(n + 1), side="left").tolist()
    own_last = last_charge  # per response: its entity's last charge before it (its own charge at the latest)
    if len(calls) > 1:  # one search over the charges ordered by (member, time)
        owned = np.sort(member * (n + 1) + np.arange(n))
        of = member[by_time] * (n + 1)
        own_last = owned[np.searchsorted(owned, of + last_charge, side="right") - 1] - of
    by_time_list, respond_list, own_list = by_time.tolist(), respond_at[by_time].tolist(), own_last.tolist()
    now_fns, member_list = [now for _, now in calls], member.tolist()
    charged = [0] * n
    responded = [0] * n
    # charged lazily: charge i + 1 is made only after the responses that follow charge i
    for i, throttle in enumerate(charged_by):
        charged[i] = throttle
        for position in range(after[i], after[i + 1]):
            if throttle > 0 or charged[own_list[position]] > 0:
                r = by_time_list[position]
                responded[r] = now_fns[member_list[r]](respond_list[position])
    return np.asarray(charged, dtype=float), np.asarray(responded, dtype=float)


def outcome(
    charges: dict[str, np.ndarray],
    key: QuotaKey,
    quota: float | None,
    windows: QuotaWindows,
    charged: np.ndarray,
    responded: np.ndarray,
) -> dict:
    """The figures of a replay (throttles) over `charges` at the candidate `quota`, and beside them
    Kafka's sampled-rate rule on the same charges and quota (None: no candidate, no Kafka figures)."""
    charge_at, respond_at, amounts, weights = (charges[k] for k in ("charge_at", "respond_at", "amount", "weight"))
    seconds = np.floor(respond_at).astype(np.int64)
    active = len(np.unique(seconds))
    throttled = len(np.unique(seconds[responded > 0]))
    delayed = float(amounts[charged > 0].sum())
    found = {
        "active_seconds": active,
        "seconds_throttled": throttled,
        "throttled_share": throttled / active,
        "total_delay_ms": float((responded * weights).sum()),
        "p99_delay_ms": _weighted_quantile(responded, weights, 0.99),
        "amount_delayed": delayed,
        "throttled_time_ms": None if quota is None else delayed / tokens_per_second(key, quota) * 1000,
    }
    if quota is None:
        return found
    mutations = key is QuotaKey.CONTROLLER_MUTATION_RATE
    kafka = SampledRate(
        tokens_per_second(key, quota),
        windows.controller_quota_window_num if mutations else windows.quota_window_num,
        windows.controller_quota_window_size_seconds if mutations else windows.quota_window_size_seconds,
    )
    kafka_arr = np.asarray(kafka.record_all(amounts, charge_at), dtype=float)
    kafka_throttled = len(np.unique(seconds[kafka_arr > 0]))
    return found | {
        "kafka_seconds_throttled": kafka_throttled,
        "kafka_throttled_share": kafka_throttled / active,
        "kafka_total_delay_ms": float((kafka_arr * weights).sum()),
        "kafka_p99_delay_ms": _weighted_quantile(kafka_arr, weights, 0.99),
    }


def _bucket_calls(engine: QuotaEngine, key: QuotaKey, user: str, client_id: str, now: float):
    """(charge(amount, at) → throttle ms, throttle_now(at) → ms) on the bucket the engine charges for
    the entity's `key` (its own, or a MemberBucket: its own and its tenant's), looked up once (the
    per-key request-time cap applied as the engine does)."""
    buckets = engine.entity_buckets(user, client_id, now)
    bucket = {
        QuotaKey.PRODUCER_BYTE_RATE: buckets.produce,
        QuotaKey.CONSUMER_BYTE_RATE: buckets.fetch,
        QuotaKey.REQUEST_PERCENTAGE: buckets.request,
    }.get(key, engine)
    if bucket is engine:  # the controller mutation quota: through the engine
        return (
            lambda amount, at: engine.charge(user, client_id, key, amount, at),
            lambda at: engine.throttle_ms(user, client_id, key, at),
        )
    if bucket is None:  # no quota for it in this replay
        return (lambda amount, at: 0), (lambda at: 0)
    if key is QuotaKey.REQUEST_PERCENTAGE:
        cap = buckets.request_cap_ms
        return (lambda amount, at: min(bucket.charge(amount, at), cap)), (lambda at: min(bucket.throttle_ms(at), cap))
    return bucket.charge, bucket.throttle_ms


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    index = int(np.searchsorted(cumulative, q * cumulative[-1], side="left"))
    return float(values[order][min(index, len(values) - 1)])


def _candidates_for(candidates: pd.DataFrame | None, user: str, client_id: str, key: str, peak: float) -> list[float]:
    """An entity's candidates: the grid around its peak second, or the table's rows for the key that
    name this user and client id or leave them out (not those naming a tenant)."""
    return _candidates(candidates, key, peak, {"tenant": None, "user": user, "client_id": client_id})


def _tenant_candidates_for(candidates: pd.DataFrame | None, tenant: str, key: str, peak: float) -> list[float]:
    """A tenant's candidates: the grid around its members' summed peak second, or the table's rows for
    the key that name this tenant or no one (not those naming a user or client id)."""
    return _candidates(candidates, key, peak, {"tenant": tenant, "user": None, "client_id": None})


def _candidates(candidates: pd.DataFrame | None, key: str, peak: float, owner: dict[str, str | None]) -> list[float]:
    """The grid around `peak` without a table; else the table's rows for `key` whose owner columns are
    empty or, where `owner` names a value, that value (a column `owner` maps to None must be empty)."""
    if candidates is None:
        return sorted({_round_quota(peak * step) for step in GRID_STEPS if peak * step > 0})
    rows = candidates[candidates["quota_key"] == key]
    for name, value in owner.items():
        if name in rows:
            rows = rows[rows[name].isna() | (rows[name] == value)] if value is not None else rows[rows[name].isna()]
    return sorted(set(rows["quota"].astype(float)))


def _round_quota(value: float) -> float:
    """Three significant digits: a quota a person can read."""
    digits = max(2 - math.floor(math.log10(value)), -12)
    return round(value, digits)


def whatif(
    table: DataFrame,
    candidates: pd.DataFrame | None = None,
    windows: QuotaWindows | None = None,
    keys: list[str] | None = None,
    stand_in: QuotaTable | None = None,
) -> DataFrame:
    """Replays every entity of the usage table, and every tenant its records name; see the module
    docstring for the columns.

    `stand_in`: the current quotas of entities whose records do not say (the proxy's --config)."""
    windows = windows or QuotaWindows()
    keys = keys or KEYS
    if candidates is not None:
        keys = [k for k in keys if k in set(candidates["quota_key"])]

    owners = recorded_owners(table)

    def replay_group(entity: tuple[pa.Scalar, pa.Scalar], records: pa.Table) -> pa.Table:
        user, client_id = (scalar.as_py() for scalar in entity)
        entity_windows = owners.entity_windows.get((user, client_id), windows)
        return replay_entity(user, client_id, records, candidates, entity_windows, keys, stand_in)

    settled: dict[str, set[tuple[str, str]]] = {}  # per tenant, its settled members: one pass
    for entity, name in owners.settled.items():
        settled.setdefault(name, set()).add(entity)

    def replay_tenant_group(group: tuple[pa.Scalar], records: pa.Table) -> pa.Table:
        tenant = group[0].as_py()
        tenant_windows = owners.tenant_windows.get(tenant, windows)
        members = owners.members.get(tenant)
        flagged = tenant in owners.tenant_flags
        in_it = frozenset(settled.get(tenant, ()))
        return replay_tenant(tenant, members, records, candidates, tenant_windows, keys, flagged, stand_in, in_it)

    # Arrow, not pandas: the records reach the replay as numbers with no per-row Python objects
    alone = replay_input(table, keys)
    if owners.settled:  # a tenant's members are replayed with it (replay_tenant), not alone
        members = table.sparkSession.createDataFrame(list(owners.settled), "user string, client_id string")
        alone = alone.join(F.broadcast(members), ["user", "client_id"], "left_anti")
    entities = alone.groupBy("user", "client_id").applyInArrow(replay_group, RESULT_SCHEMA)
    if not owners.members:  # no record names a tenant: no second job
        return entities
    by_tenant = replay_input(table, keys, by_tenant=True).groupBy("tenant")
    tenants = by_tenant.applyInArrow(replay_tenant_group, RESULT_SCHEMA)
    return entities.unionByName(tenants)
