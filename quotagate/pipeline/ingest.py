"""ingest: usage records from files or the usage topic → one deduplicated Parquet table.

Inputs may mix JSONL and Parquet, v1 and v2. What cannot be read is reported by file (or topic
partition) and skipped, and the rest of the run goes on: a malformed line, a record of an unknown
schema version, an unreadable Parquet file, an input with no records, a missing directory.
Records read from the topic go through Structured Streaming with trigger(availableNow=True): the
checkpoint remembers the offsets, so each run reads what arrived since the last one.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from quotagate.pipeline.schema import (
    DEDUP_KEY,
    RAW_SCHEMA,
    SUPPORTED_VERSIONS,
    TABLE_COLUMNS,
    TABLE_SCHEMA,
    conform,
    to_table,
)

CORRUPT = "_corrupt_record"


@dataclass(frozen=True)
class Problem:
    source: str  # the file, topic partition or directory
    what: str
    count: int = 1

    def __str__(self) -> str:
        return f"{self.source}: {self.what}" + (f" ({self.count} records skipped)" if self.count > 1 else "")


def find_usage_files(inputs: list[str]) -> tuple[list[str], list[str], list[Problem]]:
    """JSONL and Parquet files under each input (a file or a directory), hidden files left out."""
    jsonl: list[str] = []
    parquet: list[str] = []
    problems: list[Problem] = []
    for entry in inputs:
        path = Path(entry)
        if not path.exists():
            problems.append(Problem(entry, "no such file or directory"))
            continue
        files = [path] if path.is_file() else sorted(path.rglob("*"))
        found = 0
        for file in files:
            if not file.is_file() or any(part.startswith((".", "_")) for part in file.relative_to(path).parts):
                continue
            if file.suffix == ".jsonl" or file.name.endswith(".json"):
                jsonl.append(str(file))
            elif file.suffix == ".parquet":
                problem = _unreadable_parquet(file)
                if problem:
                    problems.append(problem)
                    continue
                parquet.append(str(file))
            else:
                continue
            found += 1
        if not found:
            problems.append(Problem(entry, "no usage files (*.jsonl, *.parquet) found"))
    return jsonl, parquet, problems


def _unreadable_parquet(file: Path) -> Problem | None:
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(file)
    except Exception as exc:  # a truncated or foreign file: name it and go on
        return Problem(str(file), f"not a readable Parquet file ({exc})")
    return None


def read_usage_files(spark: SparkSession, inputs: list[str]) -> tuple[DataFrame, list[Problem]]:
    """Raw records (RAW_SCHEMA + source + _corrupt_record) from the files under `inputs`."""
    jsonl, parquet, problems = find_usage_files(inputs)
    parts = []
    if jsonl:
        schema = T.StructType([*RAW_SCHEMA.fields, T.StructField(CORRUPT, T.StringType())])
        frame = spark.read.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
        parts.append(frame.json(jsonl).withColumn("source", F.col("_metadata.file_path")))
    if parquet:
        frame = spark.read.option("mergeSchema", "true").parquet(*parquet)
        parts.append(
            frame.select(
                *conform(frame, RAW_SCHEMA),
                F.lit(None).cast("string").alias(CORRUPT),
                F.col("_metadata.file_path").alias("source"),
            )
        )
    if not parts:
        return empty_raw(spark), problems
    raw = parts[0]
    for part in parts[1:]:
        raw = raw.unionByName(part)
    return raw, problems


def empty_raw(spark: SparkSession) -> DataFrame:
    extra = [T.StructField(CORRUPT, T.StringType()), T.StructField("source", T.StringType())]
    return spark.createDataFrame([], T.StructType([*RAW_SCHEMA.fields, *extra]))


def read_usage_topic(spark: SparkSession, bootstrap: str, topic: str, state_dir: str) -> DataFrame:
    """Copies what the usage topic holds beyond the checkpoint into state_dir/raw (availableNow), then
    returns every raw record copied so far (the table's dedup makes re-reading them harmless)."""
    state = Path(state_dir)
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
        stream.writeStream.format("parquet")
        .option("path", str(state / "raw"))
        .option("checkpointLocation", str(state / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    copied = spark.read.parquet(str(state / "raw")) if any((state / "raw").glob("*.parquet")) else None
    if copied is None:
        return empty_raw(spark)
    parsed = F.from_json("value", RAW_SCHEMA)
    return copied.select(
        parsed.alias("record"),
        "value",
        F.concat("source", F.lit(" offset "), F.col("offset").cast("string")).alias("at"),
    ).select(
        "record.*",
        F.when(F.col("record.v").isNull() | F.col("record.ts").isNull(), F.col("value")).alias(CORRUPT),
        F.col("at").alias("source"),
    )


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
            row["where"].removeprefix("file://"),
            f"{row['count']} × {row['problem']} (first at {row['first']})"
            if " offset " in row["first"]
            else f"{row['count']} × {row['problem']}",
            row["count"],
        )
        for row in sorted(rows, key=lambda r: (r["where"], r["problem"]))
    ]


def ingest(raw: DataFrame, existing: DataFrame | None = None) -> DataFrame:
    """Usable raw records (and an existing table) → the table, one row per (writer, seq, topic)."""
    classified = raw if "problem" in raw.columns else classify(raw)
    rows = to_table(classified.where(F.col("problem").isNull()))
    if existing is not None:
        rows = existing.select(TABLE_COLUMNS).unionByName(rows)
    return rows.dropDuplicates(DEDUP_KEY)


def read_table(spark: SparkSession, path: str) -> DataFrame:
    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no usage table here (make one with `quotagate pipeline ingest`)")
    table = spark.read.parquet(path)
    return table.select(*conform(table, TABLE_SCHEMA))


def write_table(table: DataFrame, path: str) -> None:
    """Writes the table partitioned by date, replacing what was at `path` only once it is written
    (the new table may be made from the old one, which Spark cannot overwrite while reading)."""
    target = Path(path)
    staging = target.with_name(f".{target.name}.writing-{time.time_ns()}")
    table.repartition("date").write.partitionBy("date").parquet(str(staging))
    if target.exists():
        old = target.with_name(f".{target.name}.old-{time.time_ns()}")
        target.rename(old)
        staging.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(target)
