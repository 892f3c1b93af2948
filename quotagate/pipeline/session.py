"""The SparkSession, made once at the edge (the CLI, a test fixture) and handed to every job."""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parents[2]
# Spark's Kafka source and its dependencies, fetched by `make spark-kafka-jars` (spark/pom.xml).
KAFKA_JARS_DIR = Path(os.environ.get("QUOTAGATE_SPARK_KAFKA_JARS", REPO_ROOT / ".cache" / "spark-kafka" / "jars"))


def kafka_jars() -> list[str]:
    jars = sorted(str(p) for p in KAFKA_JARS_DIR.glob("*.jar"))
    if not jars:
        raise FileNotFoundError(
            f"no Spark Kafka connector jars in {KAFKA_JARS_DIR}: run `make spark-kafka-jars` "
            "(or set QUOTAGATE_SPARK_KAFKA_JARS to a folder holding spark-sql-kafka-0-10 and its dependencies)"
        )
    return jars


def create_session(
    master: str = "local[*]",
    app_name: str = "quotagate-pipeline",
    conf: dict[str, str] | None = None,
    with_kafka: bool = False,
) -> SparkSession:
    """A SparkSession for the pipeline: local unless `master` names a cluster.

    Executors must import quotagate (the what-if job runs its quota engine there): on a cluster the
    package is shipped with the job as a zip, so the nodes need only Python, pandas and pyarrow."""
    # The Python workers must run this interpreter (the one with quotagate, pandas and pyarrow).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.shuffle.partitions", "8")  # the default 200 is for far bigger tables
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
    )
    if master.startswith("local") or "127.0.0.1" in master:
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if with_kafka:
        builder = builder.config("spark.jars", ",".join(kafka_jars()))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if not master.startswith("local"):
        spark.sparkContext.addPyFile(package_zip())
    return spark


def package_zip() -> str:
    """quotagate's sources as a zip, for executors that do not have it installed."""
    package = Path(__file__).resolve().parents[1]
    target = Path(tempfile.mkdtemp(prefix="quotagate-pyfiles-")) / "quotagate.zip"
    with zipfile.ZipFile(target, "w") as archive:
        for path in package.rglob("*.py"):
            archive.write(path, path.relative_to(package.parent).as_posix())
    return str(target)
