"""recommend: per entity and quota key, the smallest candidate meeting an objective, plus headroom.

Objective (default): throttled in at most 1 % of active seconds. The recommendation is that
candidate × (1 + headroom), rounded up to three significant digits (byte rates to whole bytes); when
no candidate meets the objective, the largest one is taken and `met` is false. Written as the proxy's
TOML [[quotas]] and as kafka-configs.sh commands.
"""

from __future__ import annotations

import math

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from quotagate.quotas import ANONYMOUS, QuotaKey, QuotaTable

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
    return chosen.withColumn("recommended", F.col("meets_at") * (1 + headroom))


def nice_quota(key: str, value: float) -> float:
    """Up to three significant digits, rounded up; whole numbers for byte rates."""
    if value <= 0:
        return value
    step = 10 ** (math.floor(math.log10(value)) - 2)
    rounded = math.ceil(value / step - 1e-9) * step
    return float(math.ceil(rounded)) if key in INTEGER_KEYS else float(f"{rounded:.6g}")


def with_current(recommendations: pd.DataFrame, table: QuotaTable | None) -> pd.DataFrame:
    """Adds `current`: the quota the proxy's table gives each entity and key (NaN when unlimited)."""
    out = recommendations.copy()
    out["recommended"] = [nice_quota(k, v) for k, v in zip(out["quota_key"], out["recommended"], strict=True)]
    current = []
    for user, client_id, key in zip(out["user"], out["client_id"], out["quota_key"], strict=True):
        resolution = table.resolve(user, client_id, QuotaKey(key)) if table is not None else None
        current.append(resolution.value if resolution is not None else float("nan"))
    out["current"] = current
    return out


def _format(key: str, value: float) -> str:
    return str(int(value)) if key in INTEGER_KEYS or value == int(value) else f"{value:g}"


def to_toml(recommendations: pd.DataFrame) -> str:
    """[[quotas]] entries for the proxy's configuration, one per entity. An ANONYMOUS user (no SASL)
    gets a client-id quota, as on a Kafka cluster without authentication."""
    lines = ["# Recommended by `quotagate pipeline recommend`"]
    for (user, client_id), rows in recommendations.groupby(["user", "client_id"], sort=True):
        lines.append("\n[[quotas]]")
        if user != ANONYMOUS:
            lines.append(f'user = "{user}"')
        lines.append(f'client_id = "{client_id}"')
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
        entity = "" if user == ANONYMOUS else f"--entity-type users --entity-name '{user}' "
        commands.append(
            f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --add-config '{config}' "
            f"{entity}--entity-type clients --entity-name '{client_id}'"
        )
    return "\n".join(commands) + "\n"
