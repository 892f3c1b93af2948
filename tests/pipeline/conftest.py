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
def _running(server, tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator:  # type: ignore[no-untyped-def]
    try:
        yield server.start(tmp_path_factory.mktemp(name))
    finally:
        server.stop()  # every process it started, by pid


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from tests.support.spark_storage import ObjectStore

    yield from _running(ObjectStore(), tmp_path_factory, "s3proxy")


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from tests.support.spark_storage import Hdfs

    yield from _running(Hdfs(), tmp_path_factory, "hdfs")


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from tests.support.spark_storage import StandaloneCluster

    yield from _running(StandaloneCluster(), tmp_path_factory, "spark-standalone")
