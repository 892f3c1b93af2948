"""The "kafka" usage sink on a cluster that wants SASL: records reach the usage topic through the
test broker's SASL_PLAINTEXT (PLAIN) listener, the password from the proxy's environment, and the
pipeline ingests and replays them, the quota in force named in every record."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quotagate.pipeline.ingest import ingest_topic
from quotagate.pipeline.table import read_table
from quotagate.pipeline.whatif import whatif
from tests.support.kafka_clients import Acked, kafka_python_producer_loop
from tests.support.kafka_fixtures import KAFKA_SASL_BOOTSTRAP, SASL_USERS
from tests.support.kafka_helpers import create_topic, unique_topic

QUOTA = 300_000  # bytes/s


def test_usage_records_reach_a_sasl_usage_topic_and_the_pipeline_ingests_them(
    spark, proxy_factory, kafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage_topic = unique_topic("quotagate-usage-sasl")
    create_topic(kafka.bootstrap, usage_topic, partitions=1)
    monkeypatch.setenv("QUOTAGATE_TEST_USAGE_PASSWORD", SASL_USERS["admin"])  # the proxy inherits it
    proxy = proxy_factory(
        kafka.bootstrap,
        f'[[quotas]]\nclient_id = "sasl-sink-producer"\nproducer_byte_rate = {QUOTA}\n'
        '[usage]\nenabled = true\nsink = "kafka"\nflush_interval_seconds = 0.5\n'
        f'kafka_topic = "{usage_topic}"\nkafka_bootstrap_servers = ["{KAFKA_SASL_BOOTSTRAP}"]\n'
        'kafka_security_protocol = "SASL_PLAINTEXT"\nkafka_sasl_mechanism = "PLAIN"\n'
        'kafka_sasl_username = "admin"\nkafka_sasl_password_env = "QUOTAGATE_TEST_USAGE_PASSWORD"\n',
    )
    topic = unique_topic("sasl-sink")
    create_topic(kafka.bootstrap, topic, partitions=1)
    kafka_python_producer_loop(proxy.bootstrap, topic, "sasl-sink-producer", 3.0, Acked())
    proxy.stop()  # flushes what it holds to the topic
    assert "usage sink failed" not in proxy.log_text(), proxy.log_text()[-3000:]
    time.sleep(0.5)

    table_uri = str(tmp_path / "table")
    done = ingest_topic(spark, kafka.bootstrap, usage_topic, str(tmp_path / "state"), table_uri)
    assert done.problems == []
    table = read_table(spark, table_uri)
    mine = table.where("client_id = 'sasl-sink-producer' and api_key = 0").collect()
    assert mine and sum(row["bytes_in"] for row in mine) > QUOTA, "three seconds of produce, in the topic"
    assert {row["quota_producer_byte_rate"] for row in mine} == {QUOTA}
    assert {row["quota_producer_byte_rate_shadow"] for row in mine} == {False}
    (row,) = (
        whatif(table.where("client_id = 'sasl-sink-producer'"), keys=["producer_byte_rate"])
        .where("is_current")
        .collect()
    )
    assert (row["quota"], row["current_source"]) == (QUOTA, "records")
