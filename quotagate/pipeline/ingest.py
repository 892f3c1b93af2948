"""ingest: usage records from files or the usage topic → rows of the usage table (table.py).

Inputs are any Hadoop-compatible URIs (storage.py) and may mix JSONL and Parquet, v1 and v2. What
cannot be read is reported by file (or topic partition) and skipped, and the rest of the run goes
on: a malformed line, a record of an unknown schema version, an unreadable or empty Parquet file,
an input with no records, a missing directory. Records read from the topic go through Structured
Streaming with trigger(availableNow=True), each micro-batch merged into the table as it comes
(foreachBatch): the checkpoint remembers the offsets, so each run reads what arrived since the last
one, and a batch read again after a failure merges to nothing new.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from quotagate.pipeline.schema import RAW_SCHEMA, SUPPORTED_VERSIONS, conform, to_table
from quotagate.pipeline.storage import Storage, child, shown_path
from quotagate.pipeline.table import Merged, merge_rows

CORRUPT = "_corrupt_record"


@dataclass(frozen=True)
class Problem:
    source: str  # the file, topic partition or directory
    what: str
    count: int = 1

    def __str__(self) -> str:
        return f"{self.source}: {self.what}" + (f" ({self.count} records skipped)" if self.count > 1 else "")


@dataclass
class UsageFiles:
    """The raw records of the usage files under some inputs, the files read, and what was wrong."""

    raw: DataFrame
    parquet: list[str]  # the Parquet files read (the read skips a corrupt one: unreadable_parquet)
    problems: list[Problem] = field(default_factory=list)


def find_usage_files(storage: Storage, inputs: list[str]) -> tuple[list[str], list[str], list[Problem]]:
    """JSONL and Parquet files under each input (a file or a directory, any URI), hidden files left out."""
    jsonl: list[str] = []
    parquet: list[str] = []
    problems: list[Problem] = []
    for entry in inputs:
        if not storage.exists(entry):
            problems.append(Problem(entry, "no such file or directory"))
            continue
        found = 0
        for file in storage.list_files(entry):
            name = file.uri.rsplit("/", 1)[-1]
            if name.endswith((".jsonl", ".json")):
                jsonl.append(file.uri)
            elif name.endswith(".parquet"):
                parquet.append(file.uri)
            else:
                continue
            found += 1
        if not found:
            problems.append(Problem(entry, "no usage files (*.jsonl, *.parquet) found"))
    return jsonl, parquet, problems


def read_usage_files(spark: SparkSession, inputs: list[str]) -> UsageFiles:
    """Raw records (RAW_SCHEMA + source + _corrupt_record) from the files under `inputs`."""
    jsonl, parquet, problems = find_usage_files(Storage(spark), inputs)
    parts = []
    if jsonl:
        schema = T.StructType([*RAW_SCHEMA.fields, T.StructField(CORRUPT, T.StringType())])
        frame = spark.read.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
        parts.append(frame.json(jsonl).withColumn("source", F.col("_metadata.file_path")))
    if parquet:
        # A truncated or foreign file is skipped here (schema merge included) and named after the
        # read, among the files no record came from (unreadable_parquet).
        frame = spark.read.option("mergeSchema", "true").option("ignoreCorruptFiles", "true").parquet(*parquet)
        parts.append(
            frame.select(
                *conform(frame, RAW_SCHEMA),
                F.lit(None).cast("string").alias(CORRUPT),
                F.col("_metadata.file_path").alias("source"),
            )
        )
    if not parts:
        return UsageFiles(empty_raw(spark), parquet, problems)
    raw = parts[0]
    for part in parts[1:]:
        raw = raw.unionByName(part)
    return UsageFiles(raw, parquet, problems)


def empty_raw(spark: SparkSession) -> DataFrame:
    extra = [T.StructField(CORRUPT, T.StringType()), T.StructField("source", T.StringType())]
    return spark.createDataFrame([], T.StructType([*RAW_SCHEMA.fields, *extra]))


def parse_topic_records(records: DataFrame) -> DataFrame:
    """The usage topic's records (value, source: topic/partition, offset) → raw records."""
    parsed = F.from_json("value", RAW_SCHEMA)
    return records.select(
        parsed.alias("record"),
        "value",
        F.concat("source", F.lit(" offset "), F.col("offset").cast("string")).alias("at"),
    ).select(
        "record.*",
        F.when(F.col("record.v").isNull() | F.col("record.ts").isNull(), F.col("value")).alias(CORRUPT),
        F.col("at").alias("source"),
    )


def stream_usage_topic(
    spark: SparkSession, bootstrap: str, topic: str, state: str, each_batch: Callable[[DataFrame], None]
) -> None:
    """Hands each micro-batch of what the usage topic holds beyond the checkpoint under `state` (any
    URI) to `each_batch` as raw records, until the topic's end as of now (availableNow)."""
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")  # retention may have removed what was never read: go on
        .load()
        .select(
            F.col("value").cast("string").alias("value"),
            F.concat(F.col("topic"), F.lit("/"), F.col("partition").cast("string")).alias("source"),
            "offset",
        )
    )
    query = (
        stream.writeStream.foreachBatch(lambda batch, _batch_id: each_batch(parse_topic_records(batch)))
        .option("checkpointLocation", child(state, "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def classify(raw: DataFrame) -> DataFrame:
    """Adds `problem`: null for a usable record, else what is wrong with it."""
    malformed = F.col(CORRUPT).isNotNull() | F.col("v").isNull() | F.col("ts").isNull()
    return raw.withColumn(
        "problem",
        F.when(malformed, F.lit("malformed record"))
        .when(~F.col("v").isin(*SUPPORTED_VERSIONS), F.concat(F.lit("unknown schema version "), F.col("v")))
        .when(
            F.col("user").isNull() | F.col("client_id").isNull() | F.col("api_key").isNull(),
            "record without user, client_id or api_key",
        ),
    )


def problems_in(classified: DataFrame) -> list[Problem]:
    """One Problem per (source, kind); Kafka sources name the partition (offsets are in `source`)."""
    rows = (
        classified.where(F.col("problem").isNotNull())
        .withColumn("where", F.regexp_replace("source", " offset .*$", ""))
        .groupBy("where", "problem")
        .agg(F.count(F.lit(1)).alias("count"), F.min("source").alias("first"))
        .collect()
    )
    return [
        Problem(
            shown_path(row["where"]),
            f"{row['count']} × {row['problem']} (first at {row['first']})"
            if " offset " in row["first"]
            else f"{row['count']} × {row['problem']}",
            row["count"],
        )
        for row in sorted(rows, key=lambda r: (r["where"], r["problem"]))
    ]


def unreadable_parquet(spark: SparkSession, classified: DataFrame, parquet: list[str]) -> list[Problem]:
    """The Parquet files (of `parquet`) the read skipped as corrupt: of those no record came from, the
    ones whose footer cannot be read (a file with no rows is no problem)."""
    if not parquet:
        return []
    seen = {shown_path(unquote(row["source"])) for row in classified.select("source").distinct().collect()}
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    problems = []
    for uri in parquet:
        if shown_path(uri) in seen:
            continue
        try:  # the footer, as Spark reads it (any filesystem)
            source = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
                jvm.org.apache.hadoop.fs.Path(uri), conf
            )
            jvm.org.apache.parquet.hadoop.ParquetFileReader.open(source).close()
        except Py4JJavaError as exc:
            why = str(exc.java_exception.toString()).splitlines()[0]
            problems.append(Problem(shown_path(uri), f"not a readable Parquet file ({why})"))
    return problems


def ingest(raw: DataFrame) -> DataFrame:
    """Usable raw records → rows of the table (merge_rows keeps one per (writer, seq, topic))."""
    classified = raw if "problem" in raw.columns else classify(raw)
    return to_table(classified.where(F.col("problem").isNull()))


@dataclass
class Ingested:
    inserted: int = 0
    dates: set[str] = field(default_factory=set)
    problems: list[Problem] = field(default_factory=list)

    def add(self, merged: Merged | Ingested, problems: list[Problem]) -> None:
        self.inserted += merged.inserted
        self.dates.update(merged.dates)
        self.problems += problems


def ingest_files(spark: SparkSession, inputs: list[str], table: str) -> Ingested:
    """The usage files under `inputs` merged into the table at `table`."""
    found = read_usage_files(spark, inputs)
    classified = classify(found.raw).persist()
    try:
        problems = found.problems + problems_in(classified) + unreadable_parquet(spark, classified, found.parquet)
        done = Ingested()
        done.add(merge_rows(spark, table, ingest(classified)), problems)
        return done
    finally:
        classified.unpersist()


def ingest_topic(spark: SparkSession, bootstrap: str, topic: str, state: str, table: str) -> Ingested:
    """What the usage topic holds beyond the checkpoint under `state`, merged into the table batch
    by batch."""
    done = Ingested()

    def merge_batch(raw: DataFrame) -> None:
        classified = classify(raw).persist()
        try:
            done.add(merge_rows(spark, table, ingest(classified)), problems_in(classified))
        finally:
            classified.unpersist()

    stream_usage_topic(spark, bootstrap, topic, state, merge_batch)
    return done
