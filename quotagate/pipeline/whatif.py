"""whatif: each entity's recorded series replayed against candidate quotas.

The replay runs the proxy's own QuotaEngine (quotagate.quotas) inside applyInPandas, one entity per
group, so there is one definition of a token bucket. Each request is charged as the proxy charges
it: a produce (and a mutation) when read, i.e. its response time less its upstream latency, with
the throttle its response carries read from the bucket at its response time; a fetch and request
time when the response is back. A v1 record is one request at `ts`; a v2 aggregate of n requests
is charged in min(n, SLICES) equal slices spread evenly over its interval, each standing for its
share of the requests, with their mean latency. Within-interval timing is lost in an aggregate:
traffic the proxy held at exactly its quota replays faithfully only at fine intervals
(usage.interval_seconds = 0.1) or from per-request records (docs/pipeline.md). Beside
it, Kafka's sampled-rate rule (quotagate.quotas.sampled_rate) on the same series and quota.

Per entity, quota key and candidate: active seconds, seconds throttled and their share, total and
p99 added delay per request (ms), and the amount (bytes for byte rates) charged while in debt.
Candidates come from a table (quota_key, quota[, user, client_id]) or, by default, a grid around
each entity's peak second.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from quotagate.pipeline.schema import FETCHES, PRODUCE
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.sampled_rate import SampledRate

SLICES = 8  # charges per v2 aggregate at most
MUTATION_APIS = (19, 20, 37)  # CreateTopics, DeleteTopics, CreatePartitions
KEYS = [k.value for k in QuotaKey]
# Charged when the request is read (the others when the response is back), as in quotas.charging.
CHARGED_AT_READ = (QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONTROLLER_MUTATION_RATE)
GRID_STEPS = [2 ** (i / 4) for i in range(-16, 5)]  # 1/16 to 2 × the peak second, 19 % apart

RESULT_SCHEMA = (
    "user string, client_id string, quota_key string, quota double, active_seconds long, "
    "seconds_throttled long, throttled_share double, total_delay_ms double, p99_delay_ms double, "
    "amount_delayed double, kafka_seconds_throttled long, kafka_throttled_share double, "
    "kafka_total_delay_ms double, kafka_p99_delay_ms double, recorded_throttle_ms double, "
    "recorded_seconds_throttled long, peak_second double, mean_rate double"
)


def series(table: DataFrame) -> DataFrame:
    """Per entity and record time: (requests, amount, recorded throttle) for each quota key."""
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
        columns += [
            F.sum(F.when(selected, F.col("requests")).otherwise(0)).alias(f"n_{key.value}"),
            F.sum(F.when(selected, amount).otherwise(0)).cast("double").alias(f"a_{key.value}"),
            F.sum(F.when(selected, F.col("throttle_ms")).otherwise(0)).cast("double").alias(f"t_{key.value}"),
            F.sum(F.when(selected, F.col("request_time_ms")).otherwise(0)).cast("double").alias(f"l_{key.value}"),
        ]
    # A v1 record is one request: kept apart even when two share a millisecond.
    request = F.when(F.col("interval_ms") == 0, F.concat_ws("/", "writer", F.col("seq").cast("string")))
    return table.groupBy("user", "client_id", "ts", "interval_ms", request.alias("request")).agg(*columns)


def replay_entity(
    group: pd.DataFrame,
    candidates: pd.DataFrame | None,
    windows: QuotaWindows,
    keys: list[str],
) -> pd.DataFrame:
    """One entity's series (rows of `series`) → one row per (quota key, candidate)."""
    user, client_id = group["user"].iat[0], group["client_id"].iat[0]
    group = group.sort_values("ts")
    out = []
    for key_name in keys:
        key = QuotaKey(key_name)
        counts = group[f"n_{key_name}"].to_numpy()
        amounts = group[f"a_{key_name}"].to_numpy()
        active = (counts > 0) & (amounts > 0)
        if not active.any():
            continue
        ts = group["ts"].to_numpy()[active]
        intervals = group["interval_ms"].to_numpy()[active]
        counts, amounts = counts[active], amounts[active]
        recorded = group[f"t_{key_name}"].to_numpy()[active]
        latencies = group[f"l_{key_name}"].to_numpy()[active] if key in CHARGED_AT_READ else np.zeros(len(ts))
        charges = _charges(ts, intervals, counts, amounts, latencies)
        seconds = np.floor(ts / 1000).astype(np.int64)
        per_second = pd.Series(amounts).groupby(seconds).sum()
        peak, span = float(per_second.max()), max(float(seconds.max() - seconds.min() + 1), 1.0)
        for quota in _candidates_for(candidates, user, client_id, key_name, peak):
            out.append(
                {
                    "user": user,
                    "client_id": client_id,
                    "quota_key": key_name,
                    "quota": float(quota),
                    **_replay(charges, key, float(quota), windows, user, client_id),
                    "recorded_throttle_ms": float(recorded.sum()),
                    "recorded_seconds_throttled": len(np.unique(seconds[recorded > 0])),
                    "peak_second": peak,
                    "mean_rate": float(amounts.sum()) / span,
                }
            )
    return pd.DataFrame(out, columns=[c.split(" ")[0] for c in RESULT_SCHEMA.split(", ")])


def _charges(
    ts: np.ndarray, intervals: np.ndarray, counts: np.ndarray, amounts: np.ndarray, latencies: np.ndarray
) -> list[tuple]:
    """(response time in s, amount, requests it stands for, latency in s) per charge, in time order."""
    charges = []
    rows = zip(ts.tolist(), intervals.tolist(), counts.tolist(), amounts.tolist(), latencies.tolist(), strict=True)
    for at, interval, n, amount, latency in rows:
        if interval <= 0:
            charges.append((at / 1000, amount, float(n), latency / n / 1000))
            continue
        slices = int(min(n, SLICES))
        step = interval / slices
        for i in range(slices):
            charges.append(((at + (i + 0.5) * step) / 1000, amount / slices, n / slices, latency / n / 1000))
    charges.sort(key=lambda c: c[0])
    return charges


def _replay(
    charges: list[tuple], key: QuotaKey, quota: float, windows: QuotaWindows, user: str, client_id: str
) -> dict[str, float]:
    engine = QuotaEngine(QuotaTable({QuotaEntity(user, client_id): {key: quota}}), windows)
    kafka = SampledRate(
        quota * (10.0 if key is QuotaKey.REQUEST_PERCENTAGE else 1.0),
        windows.controller_quota_window_num if key is QuotaKey.CONTROLLER_MUTATION_RATE else windows.quota_window_num,
        windows.controller_quota_window_size_seconds
        if key is QuotaKey.CONTROLLER_MUTATION_RATE
        else windows.quota_window_size_seconds,
    )
    bucket_delays, kafka_delays, weights = [], [], []
    delayed = 0.0
    throttled_seconds: set[int] = set()
    kafka_seconds: set[int] = set()
    active_seconds: set[int] = set()
    charge, throttle_now = engine.charge, engine.throttle_ms
    if key in CHARGED_AT_READ:
        # As the proxy does: charged when the request is read (its response time less its latency),
        # the response carrying the throttle as it stands when the response goes back, after the
        # charges of the requests read meanwhile.
        events = sorted(
            [(at - latency, 0, i) for i, (at, _, _, latency) in enumerate(charges)]
            + [(at, 1, i) for i, (at, *_) in enumerate(charges)]
        )
    else:
        events = [(at, 2, i) for i, (at, *_) in enumerate(charges)]
    bucket_by_charge = [0] * len(charges)
    kafka_by_charge = [0] * len(charges)
    for at, kind, i in events:
        amount = charges[i][1]
        if kind == 1:
            bucket_by_charge[i] = throttle_now(user, client_id, key, at)
            continue
        throttle = charge(user, client_id, key, amount, at)
        kafka_by_charge[i] = kafka.record(amount, at)
        if kind == 2:
            bucket_by_charge[i] = throttle
    for (at, amount, weight, _), throttle, kafka_throttle in zip(
        charges, bucket_by_charge, kafka_by_charge, strict=True
    ):
        second = int(at)
        active_seconds.add(second)
        if throttle > 0:
            throttled_seconds.add(second)
            delayed += amount
        if kafka_throttle > 0:
            kafka_seconds.add(second)
        bucket_delays.append(throttle)
        kafka_delays.append(kafka_throttle)
        weights.append(weight)
    w = np.asarray(weights)
    bucket, kafka_arr = np.asarray(bucket_delays, dtype=float), np.asarray(kafka_delays, dtype=float)
    active = len(active_seconds)
    return {
        "active_seconds": active,
        "seconds_throttled": len(throttled_seconds),
        "throttled_share": len(throttled_seconds) / active,
        "total_delay_ms": float((bucket * w).sum()),
        "p99_delay_ms": _weighted_quantile(bucket, w, 0.99),
        "amount_delayed": delayed,
        "kafka_seconds_throttled": len(kafka_seconds),
        "kafka_throttled_share": len(kafka_seconds) / active,
        "kafka_total_delay_ms": float((kafka_arr * w).sum()),
        "kafka_p99_delay_ms": _weighted_quantile(kafka_arr, w, 0.99),
    }


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

    def replay(group: pd.DataFrame) -> pd.DataFrame:
        return replay_entity(group, candidates, windows, keys)

    return series(table).groupBy("user", "client_id").applyInPandas(replay, RESULT_SCHEMA)
