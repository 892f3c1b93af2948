"""rollup: usage per entity (user, client_id), per (entity, topic) and per tenant, per second and minute.

Per second: sums of requests, bytes in/out, request time, partitions mutated, throttle, refusals.
Per minute: the same sums, the p50/p95/p99/max of the per-second bytes in/out, requests and
request time, and the share of active seconds in which some request was throttled. A v2 record
longer than a second counts in the second it starts.

The per-topic tables hold produce topics only. A proxy names at most `usage.topics_per_entity` topics
of an entity in an interval and sums the rest in one row (its topic is `<other topics>`, no topic's
name): here that row has no topic (null) and `other_topics` true, so it is never read as a topic,
and an entity's topic rows still sum to its produce traffic.

The per-tenant tables sum a tenant's members (the records' `tenant`: the tenant the proxy put the
entity in when it charged the request; records without one are in no tenant's rows), with
`members`, how many entities of it were active in the second (per minute: the most in one second).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from quotagate.proxy.usage_collectors import OTHER_TOPICS

ENTITY = ["user", "client_id"]
TOPIC = ["topic", "other_topics"]  # the per-topic tables' key beside the entity (produce_topics)
SUMS = [
    "requests",
    "bytes_in",
    "bytes_out",
    "request_time_ms",
    "partitions_mutated",
    "throttle_ms",
    "throttled_requests",
    "refusals",
]
TENANT = ["tenant"]
SPREAD = ["bytes_in", "bytes_out", "requests", "request_time_ms"]  # per-second figures with percentiles
# A tenant's per-second figures with percentiles: one per quota key's amount, its peaks per key.
TENANT_SPREAD = ["bytes_in", "bytes_out", "request_time_ms", "partitions_mutated", "requests"]
PERCENTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def tenant_of(table: DataFrame) -> Column:
    """The tenant the records carry, or null (no tenant) for a table from before the field."""
    return F.col("tenant") if "tenant" in table.columns else F.lit(None).cast("string")


def per_entity_topic_second(table: DataFrame) -> DataFrame:
    """The sums per (entity, tenant, topic, second), topic "" included: the one pass over the records
    that every per-second table is summed from."""
    return (
        table.withColumn("second", F.floor(F.col("ts") / 1000).cast("long"))
        .withColumn("tenant", tenant_of(table))
        .groupBy(*ENTITY, "tenant", "topic", "second")
        .agg(*(F.sum(name).alias(name) for name in SUMS))
    )


def per_second(by_entity_topic: DataFrame, by_topic: bool = False) -> DataFrame:
    """Per (entity, second), or per (entity, topic, second) for produce rows, from
    `per_entity_topic_second` (by_topic: the entity's other topics in the row with `other_topics`)."""
    if by_topic:
        rows = by_entity_topic.where(F.col("topic") != "")
        seconds = produce_topics(rows.groupBy(*ENTITY, "topic", "second").agg(*(F.sum(n).alias(n) for n in SUMS)))
    else:
        seconds = by_entity_topic.groupBy(*ENTITY, "second").agg(*(F.sum(name).alias(name) for name in SUMS))
    return seconds.withColumn("throttled", (F.col("throttled_requests") > 0).cast("int"))


def produce_topics(rows: DataFrame) -> DataFrame:
    """`rows` (produce rows, by topic) with `other_topics`: true for the row summing the topics the
    proxy did not name, whose topic is then null."""
    other = F.col("topic") == OTHER_TOPICS
    rest = [name for name in rows.columns if name not in (*ENTITY, "topic")]
    return rows.select(*ENTITY, F.when(~other, F.col("topic")).alias("topic"), other.alias("other_topics"), *rest)


def per_tenant_second(by_entity_topic: DataFrame) -> DataFrame:
    """Per (tenant, second), from `per_entity_topic_second`: its members' sums, and how many were active."""
    return (
        by_entity_topic.where(F.col("tenant").isNotNull())
        .groupBy(*TENANT, "second")
        .agg(*(F.sum(name).alias(name) for name in SUMS), F.count_distinct(*ENTITY).alias("members"))
        .withColumn("throttled", (F.col("throttled_requests") > 0).cast("int"))
    )


def per_minute(seconds: DataFrame, by_topic: bool = False, by_tenant: bool = False) -> DataFrame:
    keys = TENANT if by_tenant else [*ENTITY, *TOPIC] if by_topic else ENTITY
    spread = TENANT_SPREAD if by_tenant else SPREAD
    extra = [F.max("members").alias("members")] if by_tenant else []
    counts = ["members", "active_seconds"] if by_tenant else ["active_seconds"]
    # A minute holds at most 60 seconds: their percentiles are read off the sorted values (the value
    # of rank ceil(q × n), what percentile_approx gives for so few, at a third of its cost).
    spreads = [F.sort_array(F.collect_list(name)).alias(f"_{name}") for name in spread]
    stats = []
    for name in spread:
        values, n = F.col(f"_{name}"), F.size(f"_{name}")
        for label, q in PERCENTILES.items():
            stats.append(F.when(n > 0, F.element_at(values, F.ceil(n * q).cast("int"))).alias(f"{name}_{label}"))
        stats.append(F.col(f"{name}_max"))
    return (
        seconds.withColumn("minute", (F.floor(F.col("second") / 60) * 60).cast("long"))
        .groupBy(*keys, "minute")
        .agg(
            *(F.sum(name).alias(name) for name in SUMS),
            F.count(F.lit(1)).alias("active_seconds"),
            (F.sum("throttled") / F.count(F.lit(1))).alias("throttled_share"),
            *extra,
            *spreads,
            *(F.max(name).alias(f"{name}_max") for name in spread),
        )
        .select(*keys, "minute", *SUMS, *counts, "throttled_share", *stats)
    )


def rollup(table: DataFrame) -> dict[str, DataFrame]:
    """The six roll-ups, by name: entity_second, entity_minute, topic_second, topic_minute,
    tenant_second, tenant_minute.

    They share one aggregation of the records, cached so that writing the six reads the records
    once (not six times); `release(table)` drops it when they are written."""
    by_entity_topic = per_entity_topic_second(table).cache()
    entity_second = per_second(by_entity_topic)
    topic_second = per_second(by_entity_topic, by_topic=True)
    tenant_second = per_tenant_second(by_entity_topic)
    return {
        "entity_second": entity_second,
        "entity_minute": per_minute(entity_second),
        "topic_second": topic_second,
        "topic_minute": per_minute(topic_second, by_topic=True),
        "tenant_second": tenant_second,
        "tenant_minute": per_minute(tenant_second, by_tenant=True),
    }


def release(table: DataFrame) -> None:
    """Drops the cached aggregation `rollup(table)` made (Spark finds a cached table by its plan)."""
    per_entity_topic_second(table).unpersist()
