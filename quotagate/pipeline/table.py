"""The usage table: a Delta Lake table at any Hadoop-compatible URI, partitioned by date, one row per
(writer, seq, topic) (docs/pipeline.md, "The usage table").

- merge_rows: ingest as an idempotent MERGE that inserts the rows the table lacks; its condition
  names the dates the new rows fall in, so Delta reads only those partitions' files (a new day costs
  what that day costs, whatever the history) and rewrites none;
- read_table: the table (a plain-Parquet table from before Delta is read too, until migrated);
- migrate: a plain-Parquet table made a Delta table in place (CONVERT TO DELTA: no data copied),
  with the columns added since it was written;
- compact (OPTIMIZE: small files of each date bin-packed), vacuum (files the table stopped
  referencing, older than the retention, deleted), drop_days_before (retention: whole dates removed,
  a metadata-only delete).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from quotagate.pipeline.schema import DEDUP_KEY, TABLE_COLUMNS, TABLE_SCHEMA, conform
from quotagate.pipeline.storage import Storage, child

PARTITION = "date"


class NotDeltaTable(ValueError):
    """A plain-Parquet usage table (written before the table was Delta): it must be migrated first."""

    def __init__(self, uri: str) -> None:
        super().__init__(
            f"{uri} is a plain-Parquet usage table (written before the table became Delta Lake): "
            f"run `quotagate pipeline migrate --table {uri}` once (in place, no data copied)"
        )


def table_format(storage: Storage, uri: str) -> str | None:
    """ "delta", "parquet" (a table from before Delta) or None (nothing there)."""
    if storage.exists(child(uri, "_delta_log")):
        return "delta"
    if storage.exists(uri) and any(f.relative.endswith(".parquet") for f in storage.list_files(uri)):
        return "parquet"
    return None


def read_table(spark: SparkSession, uri: str) -> DataFrame:
    storage = Storage(spark)
    found = table_format(storage, uri)
    if found is None:
        raise FileNotFoundError(f"{uri}: no usage table here (make one with `quotagate pipeline ingest`)")
    table = spark.read.format("delta").load(uri) if found == "delta" else spark.read.parquet(uri)
    return table.select(*conform(table, TABLE_SCHEMA))


@dataclass(frozen=True)
class Merged:
    inserted: int  # rows the table did not have
    dates: tuple[str, ...]  # the partitions the new rows fell in


def merge_rows(spark: SparkSession, uri: str, rows: DataFrame) -> Merged:
    """Inserts the rows of `rows` (TABLE_SCHEMA) whose (writer, seq, topic) the table lacks, creating
    the table if there is none. Running it again with the same rows inserts nothing."""
    storage = Storage(spark)
    found = table_format(storage, uri)
    if found == "parquet":
        raise NotDeltaTable(uri)
    rows = rows.select(TABLE_COLUMNS).dropDuplicates(DEDUP_KEY).persist()
    try:
        dates = tuple(sorted(row[PARTITION] for row in rows.select(PARTITION).distinct().collect()))
        if not dates:
            return Merged(0, ())
        if found is None:
            create_table(spark, uri)
        key = [F.col(f"t.{name}").eqNullSafe(F.col(f"s.{name}")) for name in DEDUP_KEY]
        condition = F.col(f"t.{PARTITION}").isin(list(dates))  # the only partitions read
        for match in key:
            condition = condition & match
        metrics = (
            DeltaTable.forPath(spark, uri)
            .alias("t")
            .merge(rows.alias("s"), condition)
            .whenNotMatchedInsertAll()
            .withSchemaEvolution()  # a table older than a column gets it (null in its old rows)
            .execute()
            .first()
        )
    finally:
        rows.unpersist()
    return Merged(int(metrics["num_inserted_rows"]) if metrics else 0, dates)


def create_table(spark: SparkSession, uri: str) -> None:
    (DeltaTable.createIfNotExists(spark).location(uri).addColumns(TABLE_SCHEMA).partitionedBy(PARTITION).execute())


def _path_identifier(kind: str, uri: str) -> str:
    return f"{kind}.`{uri.replace('`', '``')}`"


def migrate(spark: SparkSession, uri: str) -> str:
    """Makes the plain-Parquet table at `uri` a Delta table in place; what was done, in words."""
    storage = Storage(spark)
    found = table_format(storage, uri)
    if found is None:
        raise FileNotFoundError(f"{uri}: no usage table here")
    if found == "delta":
        return f"{uri} is already a Delta table: nothing to do"
    DeltaTable.convertToDelta(spark, _path_identifier("parquet", uri), f"{PARTITION} STRING")
    have = {field.name: field.dataType for field in spark.read.format("delta").load(uri).schema.fields}
    for field in TABLE_SCHEMA.fields:
        if field.name in have and have[field.name] != field.dataType:
            raise ValueError(
                f"{uri}: column {field.name} is {have[field.name].simpleString()}, "
                f"the usage table's is {field.dataType.simpleString()}"
            )
    missing = [field for field in TABLE_SCHEMA.fields if field.name not in have]
    if missing:
        columns = ", ".join(f"`{field.name}` {field.dataType.simpleString()}" for field in missing)
        spark.sql(f"ALTER TABLE {_path_identifier('delta', uri)} ADD COLUMNS ({columns})")
    added = f", {len(missing)} columns added" if missing else ""
    return f"{uri}: converted to a Delta table in place{added}"


def compact(spark: SparkSession, uri: str, since: str | None = None) -> DataFrame:
    """OPTIMIZE: the small files of each date (from `since` on) rewritten into fewer, larger ones."""
    builder = _delta(spark, uri).optimize()
    if since is not None:
        builder = builder.where(f"{PARTITION} >= '{_checked_date(since)}'")
    return builder.executeCompaction()


def vacuum(spark: SparkSession, uri: str, retain_hours: float | None = None) -> None:
    """Deletes the files the table no longer references and stopped referencing more than
    `retain_hours` ago (None: the table's delta.deletedFileRetentionDuration, 7 days by default)."""
    _delta(spark, uri).vacuum(retain_hours)


def drop_days_before(spark: SparkSession, uri: str, first_kept: str) -> int:
    """Retention: the rows of dates before `first_kept` (yyyy-MM-dd) removed from the table; whole
    partitions, so no file is rewritten. How many rows that removed."""
    table = _delta(spark, uri)
    table.delete(F.col(PARTITION) < F.lit(_checked_date(first_kept)))
    metrics = table.history(1).first()["operationMetrics"]
    return int(metrics.get("numDeletedRows") or 0) if metrics else 0


def _delta(spark: SparkSession, uri: str) -> DeltaTable:
    found = table_format(Storage(spark), uri)
    if found is None:
        raise FileNotFoundError(f"{uri}: no usage table here")
    if found == "parquet":
        raise NotDeltaTable(uri)
    return DeltaTable.forPath(spark, uri)


def _checked_date(text: str) -> str:
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        raise ValueError(f"{text!r} is not a date (yyyy-MM-dd)") from None
