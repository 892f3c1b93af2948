"""One SparkSession (local[2]: the machine's two cores are shared) for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark", reason="the pipeline extra is not installed")


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from quotagate.pipeline.session import create_session

    session = create_session("local[2]", "quotagate-tests", {"spark.ui.enabled": "false"}, with_kafka=True)
    yield session
    session.stop()
