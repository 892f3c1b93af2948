"""The SparkSession, made once at the edge (the CLI, a test fixture) and handed to every job.

Beyond PySpark the jobs need jars: Delta Lake always (the usage table's format), Spark's Kafka
source to read the usage topic, S3A for s3a:// URIs. Each is given the way Spark users give jars,
and the pipeline only fills in what they did not give:
- what the user gave wins: `spark.jars`, `spark.jars.packages` (`--conf`, spark-defaults.conf,
  or spark-submit's `--jars`/`--packages`), or the jar already in Spark's own jars/ folder;
- otherwise the default (`spark.quotagate.jars.default`): `cache` (the default) passes the jars
  the project's fetch step put under .cache (`make spark-delta-jars` …; or the folder an environment
  variable names), or, when that folder is empty, their Maven coordinates as spark.jars.packages
  (Spark then resolves them from Maven Central, or the mirror spark.jars.repositories names);
  `packages` always the coordinates; `none` nothing;
- and once the session is up, a class of each is loaded: a missing one stops the job with an error
  naming the settings that give it (MissingJars), not a ClassNotFoundException deep in a job.
"""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from quotagate.pipeline.storage import scheme_of

REPO_ROOT = Path(__file__).resolve().parents[2]
SPARK_JARS = Path(pyspark.__file__).parent / "jars"  # PySpark's own (spark-submit's SPARK_HOME/jars)
SCALA_BINARY = "2.13"
DEFAULT_JARS_KEY = "spark.quotagate.jars.default"
DEFAULT_JARS_CHOICES = ("cache", "packages", "none")


def hadoop_version() -> str:
    """The Hadoop PySpark ships (hadoop-client-api-X.jar): hadoop-aws must be the same."""
    found = sorted(SPARK_JARS.glob("hadoop-client-api-*.jar"))
    return found[0].stem.removeprefix("hadoop-client-api-") if found else "3.5.0"


@dataclass(frozen=True)
class SparkExtra:
    """Jars a job may need beyond PySpark's, and how to give them."""

    name: str  # what it is, for messages
    probe: str  # a class only it has
    group: str
    artifact: str  # Maven artifactId (also what names its jar files)
    version: str
    cache_env: str  # the environment variable naming the folder of its jars
    cache: str  # the default folder, under the checkout, filled by make_target
    make_target: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def folder(self) -> Path:
        return Path(os.environ.get(self.cache_env) or REPO_ROOT / self.cache)

    def cached_jars(self) -> list[str]:
        return sorted(str(p) for p in self.folder.glob("*.jar"))

    def stem(self) -> str:
        """What the artifact's jar names and coordinates start with (delta-spark_4.2_2.13 → delta-spark)."""
        return self.artifact.split("_")[0]


_SPARK_MINOR = ".".join(pyspark.__version__.split(".")[:2])

DELTA = SparkExtra(
    "Delta Lake (the usage table's format)",
    "io.delta.tables.DeltaTable",
    "io.delta",
    f"delta-spark_{_SPARK_MINOR}_{SCALA_BINARY}",  # Delta builds one artifact per Spark minor
    importlib.metadata.version("delta-spark"),
    "QUOTAGATE_SPARK_DELTA_JARS",
    ".cache/spark-delta/jars",
    "spark-delta-jars",
)
KAFKA = SparkExtra(
    "Spark's Kafka source (ingest from the usage topic)",
    "org.apache.spark.sql.kafka010.KafkaSourceProvider",
    "org.apache.spark",
    f"spark-sql-kafka-0-10_{SCALA_BINARY}",
    pyspark.__version__,
    "QUOTAGATE_SPARK_KAFKA_JARS",
    ".cache/spark-kafka/jars",
    "spark-kafka-jars",
)
S3A = SparkExtra(
    "S3A, Hadoop's S3 filesystem (s3a:// URIs)",
    "org.apache.hadoop.fs.s3a.S3AFileSystem",
    "org.apache.hadoop",
    "hadoop-aws",
    hadoop_version(),
    "QUOTAGATE_SPARK_S3A_JARS",
    ".cache/spark-s3a/jars",
    "spark-s3a-jars",
)
# Delta's SQL (MERGE, OPTIMIZE, VACUUM, CONVERT TO DELTA) on path tables, in every session.
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
CATALOG_KEY = "spark.sql.catalog.spark_catalog"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


class MissingJars(RuntimeError):
    """A class the job needs is not on Spark's classpath: names the settings that would give it."""

    def __init__(self, extra: SparkExtra, default: str) -> None:
        self.extra = extra
        super().__init__(
            f"{extra.name} is not on Spark's classpath ({extra.probe} cannot be loaded). Give it as for any "
            f"Spark job: --conf spark.jars.packages={extra.coordinates} (spark-submit: --packages "
            f"{extra.coordinates}), or --conf spark.jars=<its jar files>; or fetch the default with "
            f"`make {extra.make_target}` (into {extra.folder}, or the folder {extra.cache_env} names). "
            f"{DEFAULT_JARS_KEY} is {default!r}" + ("." if default != "none" else ": nothing was added for it.")
        )


def extras_for(uris: Iterable[str], with_kafka: bool = False) -> list[SparkExtra]:
    """What a job over these inputs and outputs needs: Delta always, S3A for s3a:// URIs."""
    extras = [DELTA]
    if with_kafka:
        extras.append(KAFKA)
    if any(scheme_of(uri) == "s3a" for uri in uris if uri):
        extras.append(S3A)
    return extras


def _submit_args() -> dict[str, str]:
    """--jars and --packages of PYSPARK_SUBMIT_ARGS (how `pyspark`/spark-submit pass them)."""
    words = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    found = {}
    for flag, key in (("--jars", "spark.jars"), ("--packages", "spark.jars.packages")):
        for i, word in enumerate(words[:-1]):
            if word == flag:
                found[key] = words[i + 1]
    return found


def jar_settings(extras: Iterable[SparkExtra], conf: Mapping[str, str]) -> dict[str, str]:
    """spark.jars and spark.jars.packages for `extras`: the user's (conf and PYSPARK_SUBMIT_ARGS),
    with the default of each extra the user did not give. Raises ValueError for a bad default."""
    default = conf.get(DEFAULT_JARS_KEY, "cache")
    if default not in DEFAULT_JARS_CHOICES:
        raise ValueError(f"{DEFAULT_JARS_KEY} must be one of {', '.join(DEFAULT_JARS_CHOICES)}, got {default!r}")
    submitted = _submit_args()
    given = {key: [v for v in (conf.get(key) or submitted.get(key) or "").split(",") if v] for key in _JAR_KEYS}
    in_spark = [p.name for p in SPARK_JARS.glob("*.jar")]
    settings = {key: list(values) for key, values in given.items()}
    for extra in extras:
        named = [*given["spark.jars"], *given["spark.jars.packages"], *in_spark]
        if default == "none" or any(extra.stem() in Path(entry).name or extra.stem() in entry for entry in named):
            continue
        cached = extra.cached_jars() if default == "cache" else []
        if cached:
            settings["spark.jars"] += cached
        else:
            settings["spark.jars.packages"].append(extra.coordinates)
    return {key: ",".join(values) for key, values in settings.items() if values}


_JAR_KEYS = ("spark.jars", "spark.jars.packages")


def check_classes(spark: SparkSession, extras: Iterable[SparkExtra], default: str = "cache") -> None:
    """Raises MissingJars for the first extra whose class Spark cannot load."""
    utils = spark.sparkContext._jvm.org.apache.spark.util.Utils
    for extra in extras:
        if not utils.classIsLoadable(extra.probe):
            raise MissingJars(extra, default)


def create_session(
    master: str = "local[*]",
    app_name: str = "quotagate-pipeline",
    conf: dict[str, str] | None = None,
    with_kafka: bool = False,
    uris: Iterable[str] = (),
) -> SparkSession:
    """A SparkSession for the pipeline: local unless `master` names a cluster, with the jars the job
    needs (Delta; Kafka's source `with_kafka`; S3A when one of `uris` is s3a://).

    Executors must import quotagate (the what-if job runs its quota engine there): on a cluster the
    package is shipped with the job as a zip, so the nodes need only Python, pandas and pyarrow."""
    conf = dict(conf or {})
    extras = extras_for(uris, with_kafka)
    # The Python workers must run this interpreter (the one with quotagate, pandas and pyarrow).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.shuffle.partitions", "8")  # the default 200 is for far bigger tables
        # and Delta's 50 for rebuilding a table's state from its log: a usage table's log is small
        .config("spark.databricks.delta.snapshotPartitions", "8")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
    )
    if master.startswith("local") or "127.0.0.1" in master:
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    extensions = [name for name in conf.pop("spark.sql.extensions", "").split(",") if name]  # the user's first
    builder = builder.config(
        "spark.sql.extensions", ",".join([*(e for e in extensions if e != DELTA_EXTENSION), DELTA_EXTENSION])
    )
    builder = builder.config(CATALOG_KEY, conf.pop(CATALOG_KEY, DELTA_CATALOG))
    if os.environ.get("PYSPARK_GATEWAY_PORT") is None:  # else spark-submit started the JVM: its classpath is set
        conf.update(jar_settings(extras, conf))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        check_classes(spark, extras, conf.get(DEFAULT_JARS_KEY, "cache"))
    except MissingJars:
        spark.stop()
        raise
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
