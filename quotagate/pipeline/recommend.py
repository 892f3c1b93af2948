"""recommend: per entity and quota key, the smallest candidate meeting an objective, plus headroom.

Objective (default): throttled in at most 1 % of active seconds. The recommendation is that
candidate × (1 + headroom), rounded up to three significant digits (byte rates to whole bytes); when
no candidate meets the objective, the largest one is taken and `met` is false. Written as the proxy's
TOML [[quotas]] and as kafka-configs.sh commands.

Beside each recommendation: the quota the entity had (as the records say, else the proxy's
--config), and at that quota what the replay predicts next to what the proxy recorded (seconds
throttled, time held at the quota) or, for a shadow quota, what it observed it would have done.
"""

from __future__ import annotations

import json
import math
import shlex

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from quotagate.quotas import ANONYMOUS, QuotaKey, QuotaTable
from quotagate.quotas.engine import tokens_per_second

INTEGER_KEYS = {QuotaKey.PRODUCER_BYTE_RATE.value, QuotaKey.CONSUMER_BYTE_RATE.value}


def recommend(whatif: DataFrame, objective: float = 0.01, headroom: float = 0.2) -> DataFrame:
    """whatif rows → one row per (user, client_id, quota_key): the candidate that meets the objective
    (`meets_at`), its throttled share, whether one met it, and the recommended quota."""
    entity = Window.partitionBy("user", "client_id", "quota_key")
    ranked = whatif.withColumn("meets", F.col("throttled_share") <= objective).withColumn(
        "rank",
        F.row_number().over(
            entity.orderBy(F.col("meets").desc(), F.when(F.col("meets"), F.col("quota")).otherwise(-F.col("quota")))
        ),
    )
    chosen = ranked.where(F.col("rank") == 1).select(
        "user",
        "client_id",
        "quota_key",
        F.col("quota").alias("meets_at"),
        F.col("throttled_share").alias("throttled_share_at"),
        F.col("meets").alias("met"),
        "peak_second",
        "mean_rate",
    )
    at_current = whatif.where(F.col("is_current")).select(
        "user",
        "client_id",
        "quota_key",
        F.col("seconds_throttled").alias("current_seconds_throttled"),
        F.col("throttled_time_ms").alias("current_throttled_time_ms"),
        F.col("recorded_seconds_throttled").alias("current_recorded_seconds_throttled"),
        F.col("recorded_amount_delayed").alias("current_recorded_amount_delayed"),
        F.col("recorded_shadow_seconds_throttled").alias("current_shadow_seconds_throttled"),
        F.col("recorded_shadow_amount_delayed").alias("current_shadow_amount_delayed"),
    )
    known = whatif.groupBy("user", "client_id", "quota_key").agg(
        *(F.first(name, ignorenulls=True).alias(name) for name in CURRENT_COLUMNS)
    )
    return (
        chosen.withColumn("recommended", F.col("meets_at") * (1 + headroom))
        .join(known, ["user", "client_id", "quota_key"], "left")
        .join(at_current, ["user", "client_id", "quota_key"], "left")
    )


CURRENT_COLUMNS = ("current_quota", "current_shadow", "current_source", "quota_history")


def nice_quota(key: str, value: float) -> float:
    """Up to three significant digits, rounded up; whole numbers for byte rates."""
    if value <= 0:
        return value
    step = 10 ** (math.floor(math.log10(value)) - 2)
    rounded = math.ceil(value / step - 1e-9) * step
    return float(math.ceil(rounded)) if key in INTEGER_KEYS else float(f"{rounded:.6g}")


def with_current(recommendations: pd.DataFrame, table: QuotaTable | None) -> pd.DataFrame:
    """Adds `current`, the quota each entity had for each key (NaN when unlimited): as its records
    say (`current_source` "records"), else as `table` (the proxy's --config) gives it; and, at that
    quota, the recorded and shadow-observed time held at it (`current_recorded_held_ms`,
    `current_shadow_held_ms`: the amount over quota ÷ the quota, as `current_throttled_time_ms`)."""
    out = recommendations.copy()
    out["recommended"] = [nice_quota(k, v) for k, v in zip(out["quota_key"], out["recommended"], strict=True)]
    for name in CURRENT_COLUMNS:
        if name not in out:
            out[name] = None
    current, sources = [], []
    for row in out.itertuples():
        if row.current_source == "records":
            value, source = row.current_quota, "records"
        else:
            resolution = table.resolve(row.user, row.client_id, QuotaKey(row.quota_key)) if table else None
            value, source = (resolution.value if resolution else None), ("config" if table is not None else None)
        current.append(float("nan") if value is None or pd.isna(value) else float(value))
        sources.append(source)
    out["current"], out["current_source"] = current, sources
    for measure in ("recorded", "shadow"):
        amount = out.get(f"current_{measure}_amount_delayed")
        held = []
        for key, quota, delayed in zip(
            out["quota_key"], out["current"], amount if amount is not None else [None] * len(out), strict=True
        ):
            known = delayed is not None and not pd.isna(delayed) and not pd.isna(quota) and quota > 0
            held.append(delayed / tokens_per_second(QuotaKey(key), quota) * 1000 if known else float("nan"))
        out[f"current_{measure}_held_ms"] = held
    return out


def _format(key: str, value: float) -> str:
    return str(int(value)) if key in INTEGER_KEYS or value == int(value) else f"{value:g}"


def to_toml(recommendations: pd.DataFrame) -> str:
    """[[quotas]] entries for the proxy's configuration, one per entity. An ANONYMOUS user (no SASL)
    gets a client-id quota, as on a Kafka cluster without authentication."""
    lines = ["# Recommended by `quotagate pipeline recommend`"]
    for (user, client_id), rows in recommendations.groupby(["user", "client_id"], sort=True):
        lines.append("\n[[quotas]]")
        if user != ANONYMOUS:  # names as TOML basic strings (JSON's escapes are TOML's): any client id is safe
            lines.append(f"user = {json.dumps(user)}")
        lines.append(f"client_id = {json.dumps(client_id)}")
        for key, value in sorted(zip(rows["quota_key"], rows["recommended"], strict=True)):
            lines.append(f"{key} = {_format(key, value)}")
    return "\n".join(lines) + "\n"


def to_kafka_configs(recommendations: pd.DataFrame, bootstrap: str = "BROKER:9092") -> str:
    """The same quotas as kafka-configs.sh commands, for a cluster without the proxy."""
    commands = []
    for (user, client_id), rows in recommendations.groupby(["user", "client_id"], sort=True):
        config = ",".join(
            f"{k}={_format(k, v)}" for k, v in sorted(zip(rows["quota_key"], rows["recommended"], strict=True))
        )
        entity = "" if user == ANONYMOUS else f"--entity-type users --entity-name {shlex.quote(user)} "
        commands.append(
            f"kafka-configs.sh --bootstrap-server {shlex.quote(bootstrap)} --alter --add-config {shlex.quote(config)} "
            f"{entity}--entity-type clients --entity-name {shlex.quote(client_id)}"
        )
    return "\n".join(commands) + "\n"
