"""The usage table every job reads: v1 (per request) and v2 (per interval) records in one shape.

A row is an aggregate over `interval_ms` from `ts` (v2), or one request at `ts` (v1: interval_ms 0).
A v2 row counts each request in the interval it was charged in (a produce when read); v1's `ts` is
the response's time.
A v1 produce naming several topics becomes one row per topic, as the proxy's aggregates split it:
bytes_in evenly, the request (its count, time, throttle, refusal) on its first topic's row.
Rows are unique by (writer, seq, topic): the table's merge (table.merge_rows) keeps one of each.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from quotagate.proxy.usage_fields import (
    AGGREGATE_SCHEMA_VERSION,
    BOOL,
    DOUBLE,
    FIELDS,
    IDENTITY,
    INT32,
    INT64,
    QUOTA,
    QUOTA_FIELDS,
    STRING,
    STRINGS,
    V2_ADDED,
    VERSIONS,
    UsageField,
    fields_of,
)
from quotagate.quotas.apis import TOPIC_NAMES, apis_with

SUPPORTED_VERSIONS = VERSIONS
# Every type is the usage field's (quotagate/proxy/usage_fields.py, the one place they are stated).
SPARK_TYPES = {
    INT32: T.IntegerType(),
    INT64: T.LongType(),
    DOUBLE: T.DoubleType(),
    STRING: T.StringType(),
    BOOL: T.BooleanType(),
    STRINGS: T.ArrayType(T.StringType()),
}


def column(field: UsageField) -> T.StructField:
    return T.StructField(field.name, SPARK_TYPES[field.type])


# The quota in force for each key, and whether it was shadow (docs/usage-records.md): per key,
# the value (null: unlimited, or not recorded) and the shadow flag (null: not recorded).
# Then the windows that sized the bursts (null: not recorded).
QUOTA_COLUMNS = [column(field) for field in FIELDS if field.role == QUOTA]
WINDOW_COLUMNS = [field for field in QUOTA_COLUMNS if "window" in field.name]
QUOTA_COLUMN_NAMES = QUOTA_FIELDS

# Every field of either version, as read from JSON or Parquet (absent fields read as null; any
# integer as a long, as JSON gives it).
RAW_SCHEMA = T.StructType(
    [T.StructField(field.name, T.LongType() if field.type == INT32 else SPARK_TYPES[field.type]) for field in FIELDS]
)

# The usage table every job reads: v2's fields (a v1 record becomes a row of them: interval_ms 0,
# one row per produce topic), null where the records predate a field, and the partition column:
# `date`, yyyy-MM-dd of ts.
TABLE_SCHEMA = T.StructType(
    [*(column(field) for field in fields_of(AGGREGATE_SCHEMA_VERSION)), T.StructField("date", T.StringType())]
)
TABLE_COLUMNS = [field.name for field in TABLE_SCHEMA.fields]
DEDUP_KEY = ["writer", "seq", "topic"]
# v2 columns added after its first files (null when a file lacks them); the other measures are 0 there.
V2_ADDED_COLUMNS = V2_ADDED
V2_MEASURES = tuple(
    field.name
    for field in fields_of(AGGREGATE_SCHEMA_VERSION)
    if field.role not in (IDENTITY, QUOTA) and field.name not in V2_ADDED
)


def conform(frame: DataFrame, schema: T.StructType) -> list[Column]:
    """`frame`'s columns named in `schema`, cast to its types; null for those it lacks (older files)."""
    present = set(frame.columns)
    return [(F.col(f.name) if f.name in present else F.lit(None)).cast(f.dataType).alias(f.name) for f in schema.fields]


def date_of(ts_ms: Column) -> Column:
    return F.date_format(F.timestamp_millis(ts_ms), "yyyy-MM-dd")


def _with_legacy_names(v1: DataFrame) -> DataFrame:
    """v1 records from before writer and seq get them from where they were read and what they say:
    writer "v1:<source>", seq a hash of the record and of its rank among identical records of that
    source, so that reading the same file again gives the same keys (and a merge inserts nothing)."""
    named = F.col("writer").isNotNull() & F.col("seq").isNotNull()
    legacy = v1.where(~named)
    content = F.xxhash64(*(F.col(f.name) for f in RAW_SCHEMA.fields))
    nth = F.row_number().over(Window.partitionBy("source", "_content").orderBy("_content"))
    legacy = (
        legacy.withColumn("_content", content)
        .withColumn("writer", F.concat(F.lit("v1:"), F.col("source")))
        .withColumn("seq", F.xxhash64("_content", nth))
        .drop("_content")
    )
    return v1.where(named).unionByName(legacy)


def to_table(raw: DataFrame) -> DataFrame:
    """Raw records of a supported version (RAW_SCHEMA columns) → rows of TABLE_SCHEMA.

    `raw` may carry a `source` column (file or topic partition) that names v1 records written
    before they had writer and seq (_with_legacy_names)."""
    v1 = _with_legacy_names(raw.where(F.col("v") == 1)) if "source" in raw.columns else raw.where(F.col("v") == 1)
    # a row per topic for the APIs whose usage records name their topics (quotas/apis.py)
    per_topic = F.col("api_key").isin(*apis_with(TOPIC_NAMES))
    produce_topics = F.when(per_topic & (F.size("topics") > 0), F.col("topics")).otherwise(F.array(F.lit("")))
    v1 = v1.select("*", F.posexplode(produce_topics).alias("topic_index", "topic_name"))
    first = F.col("topic_index") == 0
    share = F.size(produce_topics)
    throttled = F.col("throttle_ms") > 0
    writer = F.col("writer")
    seq = F.col("seq")
    v1_rows = v1.select(
        F.lit(1).cast("int").alias("v"),
        F.col("ts"),
        F.lit(0).cast("int").alias("interval_ms"),
        F.col("proxy"),
        writer.alias("writer"),
        seq.alias("seq"),
        F.col("user"),
        F.col("client_id"),
        F.col("api_key").cast("int").alias("api_key"),
        F.col("topic_name").alias("topic"),
        F.when(first, 1).otherwise(0).cast("long").alias("requests"),
        F.round(F.col("bytes_in") / share).cast("long").alias("bytes_in"),
        F.when(first, F.col("bytes_out")).otherwise(0).cast("long").alias("bytes_out"),
        F.when(first & (F.col("upstream_latency_ms") > 0), F.col("upstream_latency_ms"))
        .otherwise(0.0)
        .alias("request_time_ms"),
        F.when(first, F.col("throttle_ms")).otherwise(0).cast("long").alias("throttle_ms"),
        F.when(first, F.col("throttle_ms")).otherwise(0).cast("long").alias("throttle_ms_max"),
        F.when(first & throttled, 1).otherwise(0).cast("long").alias("throttled_requests"),
        F.when(first & F.col("decision").isin("refused", "partially_refused"), 1)
        .otherwise(0)
        .cast("long")
        .alias("refusals"),
        F.when(first, F.col("partitions_mutated")).otherwise(0).cast("long").alias("partitions_mutated"),
        F.round(F.col("throttled_bytes") / share).cast("long").alias("throttled_bytes"),
        F.lit(None).cast("long").alias("first_ms"),
        F.lit(None).cast("long").alias("last_ms"),
        F.lit(None).cast("double").alias("charge_offset_ms"),
        F.when(first, F.col("shadow_throttle_ms")).otherwise(0).cast("long").alias("shadow_throttle_ms"),
        *(F.col(field.name).cast(field.dataType).alias(field.name) for field in QUOTA_COLUMNS),
        F.col("tenant").cast("string").alias("tenant"),  # an identity field the records resolve with the quotas
    )
    v2_rows = raw.where(F.col("v") == 2).select(
        F.lit(2).cast("int").alias("v"),
        "ts",
        F.col("interval_ms").cast("int").alias("interval_ms"),
        "proxy",
        "writer",
        "seq",
        "user",
        "client_id",
        F.col("api_key").cast("int").alias("api_key"),
        F.coalesce(F.col("topic"), F.lit("")).alias("topic"),
        *(F.coalesce(F.col(name), F.lit(0)).cast(TABLE_SCHEMA[name].dataType).alias(name) for name in V2_MEASURES),
        *(F.col(name).cast(TABLE_SCHEMA[name].dataType).alias(name) for name in V2_ADDED_COLUMNS),
    )
    rows = v1_rows.unionByName(v2_rows)
    return rows.withColumn("date", date_of(F.col("ts"))).select(TABLE_COLUMNS)
