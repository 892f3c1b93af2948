"""Jars the way Spark users pass them: spark.jars, spark.jars.packages and spark-submit's
--jars/--packages win, the project's cache is only the default, and a missing class stops the job
with an error naming the settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from quotagate.pipeline.session import DELTA, KAFKA, S3A, extras_for, hadoop_version, jar_settings

SPARK_DIR = Path(__file__).resolve().parents[2] / "spark"


def pom_property(pom: Path, name: str) -> str:
    found = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", pom.read_text())
    assert found, f"{pom}: no <{name}>"
    return found[1]


def test_the_poms_fetch_the_versions_the_session_names() -> None:
    """One version each: the pinned delta-spark and pyspark, and PySpark's Hadoop."""
    assert pom_property(SPARK_DIR / "delta" / "pom.xml", "delta.version") == DELTA.version
    assert pom_property(SPARK_DIR / "delta" / "pom.xml", "spark.minor") + "_" in DELTA.artifact
    assert pom_property(SPARK_DIR / "pom.xml", "spark.version") == KAFKA.version == pyspark.__version__
    assert pom_property(SPARK_DIR / "s3a" / "pom.xml", "hadoop.version") == S3A.version == hadoop_version()
    assert pom_property(SPARK_DIR / "hdfs" / "pom.xml", "hadoop.version") == hadoop_version()


def test_what_the_user_gives_wins_and_the_cache_fills_in_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    extras = extras_for(["s3a://bucket/usage", "/local/work"], with_kafka=True)
    assert extras == [DELTA, KAFKA, S3A]
    assert extras_for(["hdfs://nn/usage", "file:/x"]) == [DELTA]

    defaults = jar_settings(extras, {})
    for extra in extras:  # `make test` fetched each into its folder
        assert extra.cached_jars() and set(extra.cached_jars()) <= set(defaults["spark.jars"].split(","))
    assert "spark.jars.packages" not in defaults

    mine = {"spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.5.0", "spark.jars": "/opt/jars/delta-spark_2.13.jar"}
    given = jar_settings(extras, mine)
    assert given["spark.jars.packages"] == "org.apache.hadoop:hadoop-aws:3.5.0", "the user's, as given"
    jars = given["spark.jars"].split(",")
    assert jars[0] == "/opt/jars/delta-spark_2.13.jar" and set(KAFKA.cached_jars()) == set(jars[1:])

    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--packages io.delta:delta-spark_4.2_2.13:4.4.0 pyspark-shell")
    assert jar_settings([DELTA], {}) == {"spark.jars.packages": "io.delta:delta-spark_4.2_2.13:4.4.0"}
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")

    packages = jar_settings(extras, {"spark.quotagate.jars.default": "packages"})
    assert packages == {"spark.jars.packages": ",".join(e.coordinates for e in extras)}
    assert jar_settings(extras, {"spark.quotagate.jars.default": "none"}) == {}
    monkeypatch.setenv(DELTA.cache_env, "/nonexistent")  # no cache: Spark fetches the coordinates
    assert jar_settings([DELTA], {}) == {"spark.jars.packages": DELTA.coordinates}
    with pytest.raises(ValueError, match=r"spark\.quotagate\.jars\.default must be one of cache, packages, none"):
        jar_settings(extras, {"spark.quotagate.jars.default": "maven"})


def test_a_job_without_deltas_classes_stops_with_the_settings_that_give_them(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "quotagate", "pipeline", "rollup", "--master", "local[1]"),
            *("--table", str(tmp_path / "table"), "--out", str(tmp_path / "out")),
            *("--conf", "spark.quotagate.jars.default=none", "--conf", "spark.ui.enabled=false"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYSPARK_SUBMIT_ARGS": "pyspark-shell"},
    )
    assert done.returncode == 2, done.stderr[-3000:]
    (message,) = [line for line in done.stderr.splitlines() if line.startswith("quotagate pipeline: ")]
    assert message.startswith("quotagate pipeline: Delta Lake (the usage table's format) is not on Spark's classpath")
    for setting in (
        f"--conf spark.jars.packages={DELTA.coordinates}",
        f"--packages {DELTA.coordinates}",
        "--conf spark.jars=",
        "make spark-delta-jars",
        "spark.quotagate.jars.default is 'none'",
    ):
        assert setting in message, message
