"""whatif: each entity's recorded series replayed against candidate quotas.

The replay runs the proxy's own quota engine (quotagate.quotas) inside applyInArrow, one entity per
group, so there is one definition of a token bucket: each candidate gets a QuotaEngine, and the
loop charges the bucket that engine gives the entity. Each request is charged as the proxy charges
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

Tenants: a tenant's members (the records' `tenant`) are replayed together, one group per tenant:
their series summed (a v2 interval's rows of every member merged into one aggregate, v1 requests
each their own) and charged to one bucket per candidate, from the same QuotaEngine, against the
tenant quotas the records name (`tenant_quota_<key>`, and whether shadow: `tenant_quota_<key>_shadow`;
records written before that flag leave `current_shadow` null). Its rows have `tenant` set and no user or
client id (an entity's rows: the reverse), and `members`, how many entities the tenant had. What
this does and does not model with the members' own quotas: docs/pipeline.md, "Tenants".
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from quotagate.pipeline.rollup import tenant_of
from quotagate.pipeline.schema import WINDOW_COLUMNS
from quotagate.quotas import ANONYMOUS, QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
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
    """quota_code for the tenant's quota (`tenant_quota_<key>`, `tenant_quota_<key>_shadow`): null where
    the records name no tenant (or predate the field), 0 when the tenant has no quota for the key,
    minus the quota when shadow, the quota otherwise: records written before the shadow flag as binding
    (Owners.tenant_flags says which tenants' records carry it)."""
    value, shadow = (F.col(name) if name in table.columns else F.lit(None) for name in _tenant_columns(key))
    return _coded(tenant_of(table).isNull(), value, shadow.cast("boolean")).alias(f"quota_{key}")


def _tenant_columns(key: str) -> tuple[str, str]:
    return f"tenant_quota_{key}", f"tenant_quota_{key}_shadow"


def replay_input(table: DataFrame, keys: list[str], by_tenant: bool = False) -> DataFrame:
    """The records the replay of `keys` reads, narrowed to the columns it needs: per entity, or
    (`by_tenant`) the records naming a tenant, with the tenant's quota in the `quota_<key>` columns.

    A v1 record is one request, its topics' rows together: `request` names it (a hash of writer and
    seq; 0 for a v2 row) so that the replay merges those rows and no others, even two requests in
    the same ms. Merging happens per entity in the replay, not in a Spark aggregation: that would
    shuffle every request once more. A tenant's members' rows are merged in Spark first, one row per
    interval (and request, and API): what one replay group holds is then bounded by the tenant's
    span of time, as an entity's is, not by how many members it has."""
    selected = []
    for key in keys:
        apis, all_but = COUNTED_APIS[QuotaKey(key)]
        selected.append(~F.col("api_key").isin(*apis) if all_but else F.col("api_key").isin(*apis))
    request = F.when(F.col("interval_ms") == 0, F.xxhash64("writer", "seq")).otherwise(F.lit(0)).alias("request")
    codes = {f"quota_{key}": key for key in keys}
    code = functools.partial(tenant_quota_code, table) if by_tenant else quota_code
    columns = [code(codes[c]) if c in codes else F.col(c) for c in record_columns(keys)]
    owner = ["tenant"] if by_tenant else ["user", "client_id"]
    rows = table.where(tenant_of(table).isNotNull()) if by_tenant else table
    narrowed = rows.select(*owner, *columns, request)
    narrowed = narrowed.where(functools.reduce(lambda a, b: a | b, selected)) if selected else narrowed
    return members_merged(narrowed) if by_tenant else narrowed


def members_merged(rows: DataFrame) -> DataFrame:
    """A tenant's rows of replay_input, its members' rows of one (interval, request, API) merged as
    series() merges them: sums (null where all are), the first charge the earliest, the last the
    latest, the quota in force one value (the tenant's)."""
    group = [name for name in ("tenant", "ts", "interval_ms", "request", "api_key") if name in rows.columns]
    merged = {"first_ms": F.min, "last_ms": F.max}
    return rows.groupBy(*group).agg(
        *(
            (merged.get(name) or (F.max if name.startswith("quota_") else F.sum))(name).alias(name)
            for name in rows.columns
            if name not in group
        )
    )


def series(records: pa.Table, key: QuotaKey) -> dict[str, np.ndarray] | None:
    """One entity's records (rows of `replay_input`) → its series for `key`, one entry per v1 request
    or v2 aggregate that counts for it, in record order: ts, interval, n (requests), a (amount),
    t (recorded throttle ms), l (request time ms), b (throttled bytes), f and g (first and last
    charge ms), o (summed charge offsets ms), w (shadow throttle ms), q (the quota in force: NaN when
    unlimited or not recorded) and s (1 if it was shadow, 0 if not, NaN where not recorded). b, f, g,
    o are NaN where the records do not carry them (v1, older v2). None when nothing counts."""
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
    sources |= {"w": "shadow_throttle_ms", "q": f"quota_{key.value}"}
    values = {name: column(source)[order] for name, source in sources.items()}
    code = values["q"]  # quota_code(): NaN unknown, 0 unlimited, > 0 binding, < 0 shadow
    values["s"] = np.where(np.isnan(code), np.nan, (code < 0).astype(float))
    values["q"] = np.where(code == 0, np.nan, np.abs(code))
    new = np.r_[True, (ts[1:] != ts[:-1]) | (interval[1:] != interval[:-1]) | (request[1:] != request[:-1])]
    if not new.all():  # rows of one request or aggregate: summed, a NaN only where all of them are
        starts = np.flatnonzero(new)
        for name in "ntlabow":
            values[name] = _sum_at(values[name], starts)
        values["f"] = np.fmin.reduceat(values["f"], starts)
        for name in "gqs":  # q and s: one value for an interval's rows (the fmax skips NaN)
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
    whether its quotas were shadow (`tenant_flags`: those written before the flag do not)."""

    entity_windows: dict[tuple[str, str], QuotaWindows]
    tenant_windows: dict[str, QuotaWindows]
    members: dict[str, int]
    tenant_flags: frozenset[str] = frozenset()


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
    for row in rows:
        entity, tenant, latest = (row["user"], row["client_id"]), row["tenant"], row["windows"]
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
    """One entity's records (rows of `replay_input`) → one row per (quota key, candidate).

    `stand_in`: the quotas for entities whose records do not say which quota was in force. `windows`:
    the proxy's, from the records (recorded_owners), else the --config's."""
    return _replay_owner(
        {"user": user, "client_id": client_id, "tenant": None, "members": None},
        records,
        lambda key, peak: _candidates_for(candidates, user, client_id, key, peak),
        lambda entity_series, key: current_quota(entity_series, key, entity_stand_in(stand_in, user, client_id)),
        windows,
        keys,
    )


def replay_tenant(
    tenant: str,
    members: int | None,
    records: pa.Table,
    candidates: pd.DataFrame | None,
    windows: QuotaWindows,
    keys: list[str],
    shadow_recorded: bool = True,
) -> pa.Table:
    """One tenant's records (rows of `replay_input(by_tenant=True)`: its members' together) → one row
    per (quota key, candidate), the members' series summed into one bucket. Its current quota is
    always the records' (a record naming a tenant names its quota: null when it has none), and so is
    whether it was shadow, unless no record says (`shadow_recorded` false: written before the flag):
    then `current_shadow` is null, for recommend's --config to say."""

    def current(tenant_series: dict[str, np.ndarray], key: QuotaKey) -> dict:
        found = current_quota(tenant_series, key, None)
        return found if shadow_recorded else found | {"current_shadow": None}

    return _replay_owner(
        {"user": None, "client_id": None, "tenant": tenant, "members": members},
        records,
        lambda key, peak: _tenant_candidates_for(candidates, tenant, key, peak),
        current,
        windows,
        keys,
    )


def _replay_owner(
    owner: dict,
    records: pa.Table,
    quotas_for: Callable[[str, float], list[float]],
    current_for: Callable[[dict[str, np.ndarray], QuotaKey], dict],
    windows: QuotaWindows,
    keys: list[str],
) -> pa.Table:
    """The rows of one entity or tenant (`owner`: its identity columns), its records as one series."""
    out = []
    for key_name in keys:
        key = QuotaKey(key_name)
        entity_series = series(records, key)
        if entity_series is None:
            continue
        counts, amounts = entity_series["n"], entity_series["a"]
        active = (counts > 0) & (amounts > 0)
        if not active.any():
            continue
        column = {name: entity_series[name][active] for name in "tlbfgow"}
        ts = entity_series["ts"][active]
        charges = charges_of(
            ts,
            entity_series["interval"][active],
            counts[active],
            amounts[active],
            column["l"] if key in CHARGED_AT_READ else np.zeros(len(ts)),
            column["f"],
            column["g"],
            column["o"],
        )
        recorded, throttled_bytes = column["t"], column["b"]
        seconds = np.floor(ts / 1000).astype(np.int64)
        # in the quota's unit: request time (ms a second) as percent of one thread
        unit = MS_PER_SECOND_PER_PERCENT if key is QuotaKey.REQUEST_PERCENTAGE else 1.0
        per_second = np.bincount(seconds - seconds.min(), weights=amounts[active]) / unit
        peak, span = float(per_second.max()), max(float(seconds.max() - seconds.min() + 1), 1.0)
        current = current_for(entity_series, key)
        shadow_throttle = column["w"]
        shadow_rows = np.nan_to_num(shadow_throttle) > 0
        recorded_delayed = (
            float(np.nansum(throttled_bytes))
            if key is QuotaKey.PRODUCER_BYTE_RATE and not np.isnan(throttled_bytes).all()
            else None
        )
        quotas = set(quotas_for(key_name, peak))
        at_current = current["current_quota"]
        if at_current is not None and at_current > 0:
            quotas.add(float(at_current))
        for quota in sorted(quotas):
            out.append(
                {
                    **owner,
                    "quota_key": key_name,
                    "quota": float(quota),
                    **replay(charges, key, float(quota), windows, owner["user"], owner["client_id"], owner["tenant"]),
                    "recorded_throttle_ms": float(recorded.sum()),
                    "recorded_seconds_throttled": len(np.unique(seconds[recorded > 0])),
                    "recorded_amount_delayed": recorded_delayed,
                    "peak_second": peak,
                    "mean_rate": float(amounts[active].sum()) / unit / span,
                    **current,
                    "is_current": at_current is not None and float(quota) == float(at_current),
                    "recorded_shadow_throttle_ms": float(np.nansum(shadow_throttle)),
                    "recorded_shadow_seconds_throttled": len(np.unique(seconds[shadow_rows])),
                    "recorded_shadow_amount_delayed": float(amounts[active][shadow_rows].sum()),
                }
            )
    return pa.Table.from_pylist(out, schema=RESULT_ARROW_SCHEMA)


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


def candidate_engine(
    key: QuotaKey, quota: float, windows: QuotaWindows, user: str | None, client_id: str | None, tenant: str | None
) -> tuple[QuotaEngine, str, str]:
    """A QuotaEngine holding only the candidate, and the (user, client_id) whose bucket is the
    candidate's: the entity's own quota, or the tenant's (one member standing for all of them, the
    engine's tenant bucket: quotas/tenants.py)."""
    if tenant is None:
        return QuotaEngine(QuotaTable({QuotaEntity(user, client_id): {key: quota}}), windows), user, client_id
    tenants = Tenants((Tenant(tenant, client_ids=(REPLAYED_MEMBER,), quotas={key: quota}),))
    return QuotaEngine(QuotaTable({}, tenants=tenants), windows), ANONYMOUS, REPLAYED_MEMBER


REPLAYED_MEMBER = "replayed-members"  # the client id the members' summed charges go through


def replay(
    charges: dict[str, np.ndarray],
    key: QuotaKey,
    quota: float,
    windows: QuotaWindows,
    user: str | None,
    client_id: str | None,
    tenant: str | None = None,
) -> dict[str, float]:
    """Charges one candidate's bucket (from a QuotaEngine holding only that quota) in time order:
    the entity's (user, client_id), or the tenant's."""
    charge_at, respond_at, amounts, weights = (charges[k] for k in ("charge_at", "respond_at", "amount", "weight"))
    engine, user, client_id = candidate_engine(key, quota, windows, user, client_id, tenant)
    kafka = SampledRate(
        tokens_per_second(key, quota),
        windows.controller_quota_window_num if key is QuotaKey.CONTROLLER_MUTATION_RATE else windows.quota_window_num,
        windows.controller_quota_window_size_seconds
        if key is QuotaKey.CONTROLLER_MUTATION_RATE
        else windows.quota_window_size_seconds,
    )
    charge, throttle_now = _bucket_calls(engine, key, user, client_id, float(charge_at[0]))
    n = len(amounts)
    amount_list, charge_list = amounts.tolist(), charge_at.tolist()
    if key in CHARGED_AT_READ:
        # As the proxy: charged when read; the response carries the throttle as it stands when it goes
        # back, after the charges read meanwhile (at equal times the charge comes first). A bucket
        # only refills between charges: after a charge that called for no throttle, no response
        # can carry one until the next charge, so the bucket is not asked. The responses that
        # follow charge i (and precede charge i + 1) are by_time[after[i]:after[i + 1]].
        by_time = np.argsort(respond_at, kind="stable")
        last_charge = np.searchsorted(charge_at, respond_at[by_time], side="right") - 1
        after = np.searchsorted(last_charge, np.arange(n + 1), side="left").tolist()
        by_time_list, respond_list = by_time.tolist(), respond_at[by_time].tolist()
        charged = [0] * n  # the throttle each charge called for
        responded = [0] * n
        # map charges lazily: charge i + 1 is made only after the responses that follow charge i
        for i, throttle in enumerate(map(charge, amount_list, charge_list)):
            if throttle > 0:
                charged[i] = throttle
                for position in range(after[i], after[i + 1]):
                    responded[by_time_list[position]] = throttle_now(respond_list[position])
    else:
        charged = responded = list(map(charge, amount_list, charge_list))
    kafka_throttle = kafka.record_all(amounts, charge_at)
    bucket, kafka_arr = np.asarray(responded, dtype=float), np.asarray(kafka_throttle, dtype=float)
    seconds = np.floor(respond_at).astype(np.int64)
    active = len(np.unique(seconds))
    throttled = len(np.unique(seconds[bucket > 0]))
    kafka_throttled = len(np.unique(seconds[kafka_arr > 0]))
    delayed = float(amounts[np.asarray(charged) > 0].sum())
    return {
        "active_seconds": active,
        "seconds_throttled": throttled,
        "throttled_share": throttled / active,
        "total_delay_ms": float((bucket * weights).sum()),
        "p99_delay_ms": _weighted_quantile(bucket, weights, 0.99),
        "amount_delayed": delayed,
        "throttled_time_ms": delayed / tokens_per_second(key, quota) * 1000,
        "kafka_seconds_throttled": kafka_throttled,
        "kafka_throttled_share": kafka_throttled / active,
        "kafka_total_delay_ms": float((kafka_arr * weights).sum()),
        "kafka_p99_delay_ms": _weighted_quantile(kafka_arr, weights, 0.99),
    }


def _bucket_calls(engine: QuotaEngine, key: QuotaKey, user: str, client_id: str, now: float):
    """(charge(amount, at) → throttle ms, throttle_now(at) → ms) on the entity's bucket for `key`:
    the engine's own bucket, looked up once (its per-key request-time cap applied as the engine does)."""
    buckets = engine.entity_buckets(user, client_id, now)
    bucket = {
        QuotaKey.PRODUCER_BYTE_RATE: buckets.produce,
        QuotaKey.CONSUMER_BYTE_RATE: buckets.fetch,
        QuotaKey.REQUEST_PERCENTAGE: buckets.request,
    }.get(key)
    if bucket is None:  # the controller mutation quota: through the engine
        return (
            lambda amount, at: engine.charge(user, client_id, key, amount, at),
            lambda at: engine.throttle_ms(user, client_id, key, at),
        )
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

    def replay_tenant_group(group: tuple[pa.Scalar], records: pa.Table) -> pa.Table:
        tenant = group[0].as_py()
        tenant_windows = owners.tenant_windows.get(tenant, windows)
        members = owners.members.get(tenant)
        flagged = tenant in owners.tenant_flags
        return replay_tenant(tenant, members, records, candidates, tenant_windows, keys, flagged)

    # Arrow, not pandas: the records reach the replay as numbers with no per-row Python objects
    entities = replay_input(table, keys).groupBy("user", "client_id").applyInArrow(replay_group, RESULT_SCHEMA)
    if not owners.members:  # no record names a tenant: no second job
        return entities
    by_tenant = replay_input(table, keys, by_tenant=True).groupBy("tenant")
    tenants = by_tenant.applyInArrow(replay_tenant_group, RESULT_SCHEMA)
    return entities.unionByName(tenants)
