"""One SparkSession (local[2]: the machine's two cores are shared) for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark", reason="the pipeline extra is not installed")


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from quotagate.pipeline.session import create_session

    # Test tables are a few thousand rows: 2 shuffle partitions (one per core) instead of 8 tasks
    # per stage, each a Python worker round trip for the pandas UDFs.
    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"}
    conf["spark.databricks.delta.snapshotPartitions"] = "2"
    session = create_session("local[2]", "quotagate-tests", conf, with_kafka=True)  # Delta Lake, always
    yield session
    session.stop()


@pytest.fixture
def shared_session(spark, monkeypatch):  # type: ignore[no-untyped-def]
    """For a job run through `quotagate pipeline` in this process: its create_session gives the test
    session's SparkSession, and the stop a job ends with leaves it running for the other tests."""
    import quotagate.pipeline.session as session

    monkeypatch.setattr(session, "create_session", lambda *args, **kwargs: spark)
    monkeypatch.setattr(spark, "stop", lambda: None)
    return spark


# The storage the pipeline's users have, and a standalone cluster, once per test session (each start
# costs a JVM or three): tests/support/spark_storage.py.
@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from tests.support.spark_storage import ObjectStore

    store = ObjectStore()
    try:
        yield store.start(tmp_path_factory.mktemp("s3proxy"))
    finally:
        store.stop()


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from tests.support.spark_storage import Hdfs

    cluster = Hdfs()
    try:
        yield cluster.start(tmp_path_factory.mktemp("hdfs"))
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from tests.support.spark_storage import StandaloneCluster

    cluster = StandaloneCluster()
    try:
        yield cluster.start(tmp_path_factory.mktemp("spark-standalone"))
    finally:
        cluster.stop()
