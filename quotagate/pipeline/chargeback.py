"""chargeback: who used which share of the cluster over a period, and what it cost them.

Per period and (tenant, user, client_id): the amounts the quota keys charge (whatif.AMOUNT_COLUMN:
bytes in, bytes out, request time, partitions mutated), each beside its share of the cluster's
total for that period, and costs from a rates file (a price per GB in and out and per
request-second, in one currency). The period and the rates are in every row, so a row read alone
(a CSV line pasted into a ticket) still says what it is.

Tenants are a level of the roll-up above the entity: the usage table's `tenant` column where it has
one, else null ("no tenant declared"). The table's columns follow the usage field table
(proxy/usage_fields.py), so a `tenant` identity field there is all this needs to group by it.
Nothing here reads the proxy's configuration.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from quotagate.pipeline.rates import COSTS, PERIODS, RATE_COLUMNS, Rates
from quotagate.pipeline.rollup import ENTITY, tenant_of
from quotagate.pipeline.whatif import AMOUNT_COLUMN

MEASURES = tuple(AMOUNT_COLUMN.values())  # bytes_in, bytes_out, request_time_ms, partitions_mutated
KEY = ["tenant", *ENTITY]


def _bounds(day: Column, period: str) -> tuple[Column, Column]:
    """The calendar period (day, week or month) holding `day`: its first and last day."""
    if period == "day":
        return day, day
    if period == "week":
        first = F.to_date(F.date_trunc("week", day))
        return first, F.date_add(first, 6)
    return F.trunc(day, "month"), F.last_day(day)


def chargeback(
    table: DataFrame, rates: Rates | None, period: str = "month", since: str | None = None, until: str | None = None
) -> DataFrame:
    """One row per period and (tenant, user, client_id) that used the cluster in it: each measure,
    its share of the period's total (null when the total is 0), and with `rates` the costs.

    `since` and `until` (yyyy-MM-dd, both included) bound the days read and clip the periods, so
    `period_start`/`period_end` are the days the row really covers."""
    if period not in PERIODS:
        raise ValueError(f"period must be one of {', '.join(PERIODS)}, got {period!r}")
    rows = table
    if since:
        rows = rows.where(F.col("date") >= since)
    if until:
        rows = rows.where(F.col("date") <= until)
    day = F.col("day")
    first, last = (F.lit(None).cast("date"),) * 2 if period == "all" else _bounds(day, period)
    sums = (
        rows.select(tenant_of(rows).alias("tenant"), *ENTITY, *MEASURES, F.to_date("date").alias("day"))
        .groupBy(first.alias("_first"), last.alias("_last"), *KEY)
        .agg(*(F.sum(name).alias(name) for name in MEASURES), F.min("day").alias("_seen"), F.max("day").alias("_to"))
    )
    in_period = Window.partitionBy("_first", "_last")
    start, end = F.col("_first"), F.col("_last")
    if period == "all":  # the days read: the data's, unless bounded
        start, end = F.min("_seen").over(in_period), F.max("_to").over(in_period)
    if since:
        start = F.greatest(start, F.to_date(F.lit(since)))
    if until:
        end = F.least(end, F.to_date(F.lit(until)))
    shares = []
    for name in MEASURES:
        total = F.sum(name).over(in_period)
        shares.append(F.when(total > 0, F.col(name) / total).alias(f"{name}_share"))
    out = sums.select(
        start.alias("period_start"),
        end.alias("period_end"),
        *KEY,
        *(F.col(name) for name in MEASURES),
        *shares,
    )
    if rates is None:
        return out
    costs = {
        cost: F.col(AMOUNT_COLUMN[key]) / per_unit * getattr(rates, rate)
        for key, (cost, rate, per_unit) in COSTS.items()
    }
    return out.select(
        "*",
        *(value.alias(cost) for cost, value in costs.items()),
        sum(costs.values(), F.lit(0.0)).alias("cost_total"),
        *(F.lit(getattr(rates, name)).alias(name) for name in RATE_COLUMNS),
    )


def ordered(frame: pd.DataFrame) -> pd.DataFrame:
    """A collected chargeback as it is written: by period, the largest cost (without rates: bytes) first."""
    size = frame["cost_total"] if "cost_total" in frame.columns else frame["bytes_in"] + frame["bytes_out"]
    frame = frame.assign(_size=size).sort_values(
        ["period_start", "_size", "tenant", "user", "client_id"],
        ascending=[True, False, True, True, True],
        na_position="first",
    )
    return frame.drop(columns="_size").reset_index(drop=True)
