"""producer_ids_rate (KIP-936) through the proxy on a real broker, with real idempotent producers.

A churner that makes a new confluent-kafka (librdkafka) idempotent producer per record, so a new
producer ID per Produce, is held to the rate; a steady idempotent producer of the same user, which
keeps its one ID, goes on untouched although it shares the user's bucket with the churner.
"""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kafka_rig import java_program
from tests.support.admin_quotas import admin_proxy
from tests.support.kafka_clients import WINDOWS, librdkafka_sasl_plain, quota_config, run_threads
from tests.support.kafka_fixtures import SASL_USERS
from tests.support.kafka_helpers import create_topic, unique_topic
from tests.support.proxy_fixtures import metric

pytestmark = pytest.mark.matrix

RATE = 2  # new producer IDs per second; quota_window_num = 1: a burst of 2
SECONDS = 14.0
CHURNERS = 4


def test_a_producer_per_record_is_held_to_the_rate_and_a_steady_producer_is_untouched(proxy_factory, kafka) -> None:
    # Without SASL every client is user ANONYMOUS: the <default> user's entry gives it one bucket,
    # shared by both client ids (Kafka's level 6).
    proxy = proxy_factory(kafka.bootstrap, WINDOWS + quota_config(f'user = "<default>"\nproducer_ids_rate = {RATE}'))
    topic = unique_topic("pids")
    create_topic(proxy.bootstrap, topic, partitions=1)
    lock = threading.Lock()
    churned: list[float] = []  # when each churner record (one new producer ID) was acknowledged
    churn_errors: list[int] = []
    steady_acked: list[float] = []
    steady_errors: list[str] = []
    started = time.monotonic()

    steady_started = threading.Event()

    def churn() -> None:
        steady_started.wait(30)  # its one ID is seen before the churner puts the bucket in debt
        while time.monotonic() - started < SECONDS:
            producer = Producer(
                {
                    "bootstrap.servers": proxy.bootstrap,
                    "client.id": "churner",
                    "enable.idempotence": True,
                    "linger.ms": 0,
                }
            )

            def delivered(err, _msg) -> None:
                with lock:
                    if err is None:
                        churned.append(time.monotonic())
                    else:
                        churn_errors.append(err.code())

            producer.produce(topic, value=b"churn", on_delivery=delivered)
            producer.flush(30)

    def steady() -> None:
        producer = Producer(
            {"bootstrap.servers": proxy.bootstrap, "client.id": "steady", "enable.idempotence": True, "linger.ms": 0}
        )

        def delivered(err, _msg) -> None:
            with lock:
                if err is None:
                    steady_acked.append(time.monotonic())
                    steady_started.set()
                else:
                    steady_errors.append(str(err))

        while time.monotonic() - started < SECONDS:
            producer.produce(topic, value=b"steady", on_delivery=delivered)
            producer.flush(10)
            time.sleep(0.05)
        producer.flush(30)

    run_threads(steady, *([churn] * CHURNERS))
    measured_from = started + 4  # past the burst and the producers' start-up
    churn_rate = sum(measured_from <= at < started + SECONDS for at in churned) / (SECONDS - 4)
    refusals = metric(proxy, "quotagate_producer_id_refusals_total")
    steady_gaps = [b - a for a, b in itertools.pairwise(at for at in steady_acked if at >= measured_from)]
    print(
        f"churner: {len(churned)} new producer IDs accepted, {churn_rate:.2f}/s after 4 s, "
        f"{len(churn_errors)} delivery errors, {refusals:.0f} refusals; steady: {len(steady_acked)} records, "
        f"longest gap after 4 s {max(steady_gaps):.3f} s; churner errors {sorted(set(churn_errors))}"
    )
    assert refusals > 0, "the churner must have been refused"
    assert 0.5 * RATE <= churn_rate <= 1.5 * RATE
    # librdkafka (2.16) hands error 89 on a produce to the delivery callback rather than retrying it,
    # so every refusal shows as one failed record: all of them the churner's, none the steady one's.
    assert set(churn_errors) == {89}
    assert refusals >= len(churn_errors)
    assert steady_errors == []
    assert len(steady_acked) >= SECONDS / 0.2  # it kept producing all along (one record per ~60 ms)


@pytest.mark.java
def test_a_rate_set_through_the_java_admin_api_binds_on_the_running_proxy(proxy_factory, kafka, tmp_path) -> None:
    """kafka-configs.sh (4.2) refuses producer_ids_rate client-side ("Only quota and SCRAM credential
    configs can be added"), so the Java Admin API sets it, on the client-id-prefix entity."""
    proxy = admin_proxy(proxy_factory, tmp_path)
    source = Path(__file__).resolve().parents[1] / "java" / "ClientIdPrefixQuota.java"
    result = subprocess.run(
        java_program(source, proxy.bootstrap, "admin", SASL_USERS["admin"], "churner", "producer_ids_rate", "1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "exact prefix: {{client-id-prefix=churner}={producer_ids_rate=1.0}}" in result.stdout, result.stdout
    topic = unique_topic("pids-api")
    create_topic(kafka.bootstrap, topic, partitions=1)
    sasl = librdkafka_sasl_plain("alice")
    outcomes: list[int] = []
    started = time.monotonic()
    while time.monotonic() - started < 8.0:
        producer = Producer(
            {"bootstrap.servers": proxy.bootstrap, "client.id": "churner-1", "enable.idempotence": True, **sasl}
        )
        producer.produce(topic, value=b"c", on_delivery=lambda err, _msg: outcomes.append(err.code() if err else 0))
        producer.flush(30)
    accepted, errors = outcomes.count(0), [code for code in outcomes if code]
    print(f"after the Admin API set 1/s: {accepted} new producer IDs accepted in 8 s, {len(errors)} refused")
    assert set(errors) == {89}
    assert accepted <= 8 + 2  # 1/s and a burst of 1 (quota_window_num = 1), strict admission
