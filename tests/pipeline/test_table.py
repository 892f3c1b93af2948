"""The usage table in Delta Lake: ingest merges rows in once, touching only the dates they fall in;
old plain-Parquet tables are read and migrated in place; compaction and retention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from quotagate.cli import main
from quotagate.pipeline.schema import QUOTA_COLUMN_NAMES, TABLE_COLUMNS
from quotagate.pipeline.synthetic import START_MS, SyntheticEntity, synthetic_aggregates
from quotagate.pipeline.table import NotDeltaTable, merge_rows, read_table

DAY_MS = 86_400_000
ENTITIES = [SyntheticEntity("alice", "a", 10_000, 5), SyntheticEntity("bob", "b", 20_000, 5)]


def day(spark, index: int, seconds: int = 20):
    """Two entities' aggregates for `seconds` from midnight of day `index` (2026-01-01 + index)."""
    return synthetic_aggregates(spark, ENTITIES, seconds, start_ms=START_MS + index * DAY_MS).withColumn(
        "writer", F.concat(F.col("writer"), F.lit(f"-day{index}"))
    )


def last_commit(table: Path) -> list[dict]:
    """The actions of the table's newest Delta commit (its _delta_log JSON lines)."""
    newest = max((table / "_delta_log").glob("*.json"))
    return [json.loads(line) for line in newest.read_text().splitlines()]


def test_ingest_merges_new_rows_once_and_touches_only_their_dates(spark, tmp_path: Path) -> None:
    table = tmp_path / "table"
    first = merge_rows(spark, str(table), day(spark, 0).unionByName(day(spark, 1)))
    assert (first.inserted, first.dates) == (80, ("2026-01-01", "2026-01-02"))
    assert merge_rows(spark, str(table), day(spark, 1)).inserted == 0, "the same rows again: nothing"

    # a new day, and an overlap with day 1 (half of it already in the table)
    added = merge_rows(spark, str(table), day(spark, 2).unionByName(day(spark, 1, seconds=30)))
    assert (added.inserted, added.dates) == (40 + 20, ("2026-01-02", "2026-01-03"))
    actions = last_commit(table)
    written = {a["add"]["partitionValues"]["date"] for a in actions if "add" in a}
    assert written <= {"2026-01-02", "2026-01-03"} and not any("remove" in a for a in actions), actions
    rows = read_table(spark, str(table))
    assert rows.count() == 140 and rows.select("writer", "seq", "topic").distinct().count() == 140
    assert {r["date"] for r in rows.select("date").distinct().collect()} == {"2026-01-01", "2026-01-02", "2026-01-03"}

    # The dates in the merge condition prune what it reads: with day 0's files gone from the disk, a
    # merge of days 2 and 3 still works (reading one of them would fail).
    for file in (table / "date=2026-01-01").glob("*.parquet"):
        file.unlink()
    assert merge_rows(spark, str(table), day(spark, 3).unionByName(day(spark, 2))).inserted == 40


def test_a_plain_parquet_table_is_read_then_migrated_in_place_with_the_columns_added_since(
    shared_session, tmp_path: Path
) -> None:
    spark = shared_session
    table = str(tmp_path / "old-table")
    # as write_table wrote it before Delta, from before the quota columns
    old = day(spark, 0).drop(*QUOTA_COLUMN_NAMES, "shadow_throttle_ms")
    old.repartition("date").write.partitionBy("date").parquet(table)
    assert read_table(spark, table).count() == 40, "read as it is, until migrated"
    with pytest.raises(NotDeltaTable, match="quotagate pipeline migrate --table"):
        merge_rows(spark, table, day(spark, 1))

    assert main(["pipeline", "migrate", "--table", table]) == 0
    assert (tmp_path / "old-table" / "_delta_log").is_dir()
    migrated = read_table(spark, table)
    assert migrated.columns == TABLE_COLUMNS and migrated.count() == 40
    assert spark.read.format("delta").load(table).columns[-len(QUOTA_COLUMN_NAMES) :] == list(QUOTA_COLUMN_NAMES)
    assert merge_rows(spark, table, day(spark, 1).unionByName(day(spark, 0))).inserted == 40
    assert main(["pipeline", "migrate", "--table", table]) == 0, "again: already a Delta table"


@pytest.fixture
def short_retention(spark):  # type: ignore[no-untyped-def]
    """VACUUM of files removed a moment ago (Delta refuses less than 7 days unless told)."""
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    yield
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "true")


def test_compact_bin_packs_small_files_vacuum_deletes_the_old_ones_and_retention_drops_whole_days(
    shared_session, short_retention, tmp_path: Path, capsys
) -> None:
    spark, table = shared_session, tmp_path / "table"
    merge_rows(spark, str(table), day(spark, 0).unionByName(day(spark, 1)).unionByName(day(spark, 2)))
    for part in (1, 2):  # two more ingests into the last date: more small files there
        more = day(spark, 2, seconds=5).withColumn("seq", F.col("seq") + 100 * part)
        more.write.format("delta").mode("append").save(str(table))
    before = sorted((table / "date=2026-01-03").glob("*.parquet"))
    assert len(before) >= 3
    compact = ["pipeline", "compact", "--table", str(table), "--since", "2026-01-03", "--vacuum", "--retain-hours", "0"]
    assert main(compact) == 0
    assert "files rewritten into 1 in 1 dates" in capsys.readouterr().out
    after = sorted((table / "date=2026-01-03").glob("*.parquet"))
    assert len(after) == 1 and after[0] not in before, "one new file holds the date; vacuum deleted the old"
    assert read_table(spark, str(table)).count() == 3 * 40 + 2 * 10

    assert main(["pipeline", "retention", "--table", str(table), "--keep-days", "2", "--today", "2026-01-03"]) == 0
    assert "40 rows of dates before 2026-01-02 removed" in capsys.readouterr().out
    dates = {r["date"] for r in read_table(spark, str(table)).select("date").distinct().collect()}
    assert dates == {"2026-01-02", "2026-01-03"}
    actions = last_commit(table)
    assert {a["remove"]["partitionValues"]["date"] for a in actions if "remove" in a} == {"2026-01-01"}
    assert not any("add" in a for a in actions), "a whole date goes without rewriting a file"
