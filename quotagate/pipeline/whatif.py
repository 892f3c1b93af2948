"""whatif: each entity's recorded series replayed against candidate quotas.

The replay runs the proxy's own quota engine (quotagate.quotas) inside applyInPandas, one entity per
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
back from its mute, which an aggregate does not keep). Beside it, Kafka's sampled-rate rule
(quotagate.quotas.sampled_rate) on the same charges and quota. Candidates come from a table
(quota_key, quota[, user, client_id]) or, by default, a grid around each entity's peak second.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from quotagate.pipeline.schema import FETCHES, PRODUCE
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.engine import tokens_per_second
from quotagate.quotas.sampled_rate import SampledRate

SLICES = 16  # charges per v2 aggregate at most
MUTATION_APIS = (19, 20, 37)  # CreateTopics, DeleteTopics, CreatePartitions
KEYS = [k.value for k in QuotaKey]
# Charged when the request is read (the others when the response is back), as in quotas.charging.
CHARGED_AT_READ = (QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONTROLLER_MUTATION_RATE)
GRID_STEPS = [2 ** (i / 4) for i in range(-16, 5)]  # 1/16 to 2 × the peak second, 19 % apart

RESULT_SCHEMA = (
    "user string, client_id string, quota_key string, quota double, active_seconds long, "
    "seconds_throttled long, throttled_share double, total_delay_ms double, p99_delay_ms double, "
    "amount_delayed double, throttled_time_ms double, kafka_seconds_throttled long, "
    "kafka_throttled_share double, kafka_total_delay_ms double, kafka_p99_delay_ms double, "
    "recorded_throttle_ms double, recorded_seconds_throttled long, recorded_amount_delayed double, "
    "peak_second double, mean_rate double"
)
RESULT_COLUMNS = [c.split(" ")[0] for c in RESULT_SCHEMA.split(", ")]


def series(table: DataFrame, keys: list[str] | None = None) -> DataFrame:
    """Per entity and record time, for each quota key (of `keys`, default all): requests, amount,
    recorded throttle and throttled amount, request time, and when the requests were charged."""
    api = F.col("api_key")
    per_key = {
        QuotaKey.PRODUCER_BYTE_RATE: (api == PRODUCE, F.col("bytes_in")),
        QuotaKey.CONSUMER_BYTE_RATE: (api.isin(*FETCHES), F.col("bytes_out")),
        # a (share) fetch's long-poll wait cannot be told from its work in the records: fetches are left out
        QuotaKey.REQUEST_PERCENTAGE: (~api.isin(*FETCHES), F.col("request_time_ms")),
        QuotaKey.CONTROLLER_MUTATION_RATE: (api.isin(*MUTATION_APIS), F.col("partitions_mutated")),
    }
    columns = []
    for key, (selected, amount) in per_key.items():
        k = key.value
        if keys is not None and k not in keys:
            continue
        columns += [
            F.sum(F.when(selected, F.col("requests")).otherwise(0)).alias(f"n_{k}"),
            F.sum(F.when(selected, amount).otherwise(0)).cast("double").alias(f"a_{k}"),
            F.sum(F.when(selected, F.col("throttle_ms")).otherwise(0)).cast("double").alias(f"t_{k}"),
            F.sum(F.when(selected, F.col("request_time_ms")).otherwise(0)).cast("double").alias(f"l_{k}"),
            # null where the records do not carry them (v1, older v2)
            F.sum(F.when(selected, F.col("throttled_bytes"))).cast("double").alias(f"b_{k}"),
            F.min(F.when(selected, F.col("first_ms"))).cast("double").alias(f"f_{k}"),
            F.max(F.when(selected, F.col("last_ms"))).cast("double").alias(f"g_{k}"),
            F.sum(F.when(selected, F.col("charge_offset_ms"))).cast("double").alias(f"o_{k}"),
        ]
    # A v1 record is one request (its topics' rows together): kept apart even when two share a ms.
    per_request = F.col("interval_ms") == 0
    writer, seq = F.when(per_request, F.col("writer")).alias("writer"), F.when(per_request, F.col("seq")).alias("seq")
    return table.groupBy("user", "client_id", "ts", "interval_ms", writer, seq).agg(*columns)


def replay_entity(
    group: pd.DataFrame,
    candidates: pd.DataFrame | None,
    windows: QuotaWindows,
    keys: list[str],
) -> pd.DataFrame:
    """One entity's series (rows of `series`) → one row per (quota key, candidate)."""
    user, client_id = group["user"].iat[0], group["client_id"].iat[0]
    out = []
    for key_name in keys:
        key = QuotaKey(key_name)
        counts = group[f"n_{key_name}"].to_numpy(dtype=float)
        amounts = group[f"a_{key_name}"].to_numpy(dtype=float)
        active = (counts > 0) & (amounts > 0)
        if not active.any():
            continue
        column = {name: group[f"{name}_{key_name}"].to_numpy(dtype=float, na_value=np.nan)[active] for name in "tlbfgo"}
        ts = group["ts"].to_numpy(dtype=float)[active]
        charges = charges_of(
            ts,
            group["interval_ms"].to_numpy(dtype=float)[active],
            counts[active],
            amounts[active],
            column["l"] if key in CHARGED_AT_READ else np.zeros(len(ts)),
            column["f"],
            column["g"],
            column["o"],
        )
        recorded, throttled_bytes = column["t"], column["b"]
        seconds = np.floor(ts / 1000).astype(np.int64)
        per_second = pd.Series(amounts[active]).groupby(seconds).sum()
        peak, span = float(per_second.max()), max(float(seconds.max() - seconds.min() + 1), 1.0)
        recorded_delayed = (
            float(np.nansum(throttled_bytes))
            if key is QuotaKey.PRODUCER_BYTE_RATE and not np.isnan(throttled_bytes).all()
            else None
        )
        for quota in _candidates_for(candidates, user, client_id, key_name, peak):
            out.append(
                {
                    "user": user,
                    "client_id": client_id,
                    "quota_key": key_name,
                    "quota": float(quota),
                    **replay(charges, key, float(quota), windows, user, client_id),
                    "recorded_throttle_ms": float(recorded.sum()),
                    "recorded_seconds_throttled": len(np.unique(seconds[recorded > 0])),
                    "recorded_amount_delayed": recorded_delayed,
                    "peak_second": peak,
                    "mean_rate": float(amounts[active].sum()) / span,
                }
            )
    return pd.DataFrame(out, columns=RESULT_COLUMNS)


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


def replay(
    charges: dict[str, np.ndarray], key: QuotaKey, quota: float, windows: QuotaWindows, user: str, client_id: str
) -> dict[str, float]:
    """Charges one candidate's bucket (from a QuotaEngine holding only that quota) in time order."""
    charge_at, respond_at, amounts, weights = (charges[k] for k in ("charge_at", "respond_at", "amount", "weight"))
    engine = QuotaEngine(QuotaTable({QuotaEntity(user, client_id): {key: quota}}), windows)
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
        for i, (amount, at) in enumerate(zip(amount_list, charge_list, strict=True)):
            throttle = charged[i] = charge(amount, at)
            if throttle > 0:
                for position in range(after[i], after[i + 1]):
                    responded[by_time_list[position]] = throttle_now(respond_list[position])
    else:
        charged = responded = [charge(amount, at) for amount, at in zip(amount_list, charge_list, strict=True)]
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
    if candidates is None:
        return sorted({_round_quota(peak * step) for step in GRID_STEPS if peak * step > 0})
    rows = candidates[candidates["quota_key"] == key]
    if "user" in rows:
        rows = rows[rows["user"].isna() | (rows["user"] == user)]
    if "client_id" in rows:
        rows = rows[rows["client_id"].isna() | (rows["client_id"] == client_id)]
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
) -> DataFrame:
    """Replays every entity of the usage table; see the module docstring for the columns."""
    windows = windows or QuotaWindows()
    keys = keys or KEYS
    if candidates is not None:
        keys = [k for k in keys if k in set(candidates["quota_key"])]

    def replay_group(group: pd.DataFrame) -> pd.DataFrame:
        return replay_entity(group, candidates, windows, keys)

    return series(table, keys).groupBy("user", "client_id").applyInPandas(replay_group, RESULT_SCHEMA)
