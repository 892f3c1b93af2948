"""The controller mutation quota (KIP-599) through the proxy with a real broker (issue 4).

Raw requests (kafka-python's classes over a socket) pin exact API versions: strict mode from
CreateTopics v6 / DeleteTopics v5 / CreatePartitions v3, permissive below. Each client-id has its
own bucket, so every test uses fresh ones; a throttled connection is muted, so a follow-up request
"within the throttle time" goes over a new connection, as a client would after reconnecting.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import ThrottlingQuotaExceededError
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    DeleteTopicsRequest,
)

from kafka_rig import java_program
from tests.support.kafka_helpers import unique_topic
from tests.support.mutation_client import THROTTLED, assert_throttle, call, cleanup, create

pytestmark = pytest.mark.matrix


def mutation_proxy(proxy_factory, kafka, rate: float, window_num: int, window_seconds: float = 1):
    return proxy_factory(
        kafka.bootstrap,
        f"controller_quota_window_num = {window_num}\ncontroller_quota_window_size_seconds = {window_seconds}\n"
        f'[[quotas]]\nclient_id = "<default>"\ncontroller_mutation_rate = {rate}\n',
    )


def test_seed_example_seven_topics_of_80_partitions_admitted_then_the_next_create_is_refused(
    proxy_factory, kafka
) -> None:
    proxy = mutation_proxy(proxy_factory, kafka, rate=5, window_num=100)  # burst 500
    names = [unique_topic("seed") for _ in range(7)]
    try:
        started = time.monotonic()
        first = call(proxy.port, create(7, names, 80), "seed")
        assert [(t.name, t.error_code) for t in first.topics] == [(n, 0) for n in names]
        # Strict: every topic admitted, so no throttle (and no mute), though tokens are at -60 (spec §4).
        assert first.throttle_time_ms == 0
        late = unique_topic("seed-late")
        second = call(proxy.port, create(7, [late], 1), "seed")
        assert [(t.name, t.error_code, t.error_message) for t in second.topics] == [
            (late, THROTTLED, "The throttling quota has been exceeded.")
        ]
        # 12 s minus the time since the first was charged: when it was read, before the broker created 560
        # partitions (~1 s in KRaft mode, seconds more with ZooKeeper, where CreateTopics answers once
        # every partition has a leader).
        since_first_ms = (time.monotonic() - started) * 1000
        assert 12000 - since_first_ms - 500 <= second.throttle_time_ms <= 12000, since_first_ms
    finally:
        cleanup(kafka, names)


@pytest.mark.parametrize(("version", "mode"), [(7, "strict"), (5, "permissive")])
def test_kafka_example_two_topics_of_30_partitions_under_rate_2_burst_20(
    proxy_factory, kafka, version: int, mode: str
) -> None:
    proxy = mutation_proxy(proxy_factory, kafka, rate=2, window_num=10)  # burst 20
    names = [unique_topic(mode), unique_topic(mode)]
    try:
        response = call(proxy.port, create(version, names, 30), f"kafka-example-{mode}")
        codes = [(t.name, t.error_code) for t in response.topics]
        if mode == "strict":
            assert codes == [(names[0], 0), (names[1], THROTTLED)]
            assert_throttle(response.throttle_time_ms, 5000)
        else:
            assert codes == [(names[0], 0), (names[1], 0)]
            assert_throttle(response.throttle_time_ms, 20000)
    finally:
        cleanup(kafka, names)


def test_validate_only_is_never_charged(proxy_factory, kafka) -> None:
    proxy = mutation_proxy(proxy_factory, kafka, rate=2, window_num=10)  # burst 20
    name = unique_topic("validate")
    checked = call(proxy.port, create(7, [name], 500, validate_only=True), "validator")
    assert [(t.name, t.error_code) for t in checked.topics] == [(name, 0)]
    assert checked.throttle_time_ms == 0
    # The bucket is still full: a real create of 20 partitions goes through without a throttle.
    made = call(proxy.port, create(7, [name], 20), "validator")
    try:
        assert [(t.name, t.error_code) for t in made.topics] == [(name, 0)]
        assert made.throttle_time_ms == 0
    finally:
        cleanup(kafka, [name])


def test_create_partitions_and_delete_topics_are_metered_the_same_way(proxy_factory, kafka) -> None:
    proxy = mutation_proxy(proxy_factory, kafka, rate=2, window_num=10)  # burst 20
    names = [unique_topic("grow"), unique_topic("grow")]
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="setup-unlimited-but-default")
    try:
        # Set-up through the proxy by a client whose bucket is then spent: 2 topics of 1 partition.
        response = call(proxy.port, create(7, names, 1), "setup")
        assert [t.error_code for t in response.topics] == [0, 0]
        admin.describe_topics(names)  # the proxy learns the partition counts from this Metadata

        grow_topic = CreatePartitionsRequest.CreatePartitionsTopic
        grow = CreatePartitionsRequest(
            version=3,
            topics=[grow_topic(version=3, name=n, count=31, assignments=None) for n in names],
            timeout_ms=30000,
            validate_only=False,
        )
        grown = call(proxy.port, grow, "grower")  # each adds 30 partitions: first in, second refused
        assert [(r.name, r.error_code) for r in grown.results] == [(names[0], 0), (names[1], THROTTLED)]
        assert_throttle(grown.throttle_time_ms, 5000)

        state = DeleteTopicsRequest.DeleteTopicState
        delete = DeleteTopicsRequest(version=6, topics=[state(version=6, name=n) for n in names], timeout_ms=30000)
        deleted = call(proxy.port, delete, "deleter")  # 31 partitions: first in (20 -> -11), second refused
        assert [(r.name, r.error_code) for r in deleted.responses] == [(names[0], 0), (names[1], THROTTLED)]
        assert_throttle(deleted.throttle_time_ms, 5500)
    finally:
        admin.close()
        cleanup(kafka, names)


def test_kafka_python_admin_surfaces_the_quota_error(proxy_factory, kafka) -> None:
    proxy = mutation_proxy(proxy_factory, kafka, rate=2, window_num=10)  # burst 20
    names = [unique_topic("kp"), unique_topic("kp")]
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="kp-admin")
    # kafka-python 3 honours throttle_time_ms by pausing that connection itself, so the next
    # create goes through a second client (same client-id, so the same bucket).
    other = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="kp-admin")
    try:
        admin.create_topics([NewTopic(names[0], 30, 1)])  # admitted, 10 in debt
        with pytest.raises(ThrottlingQuotaExceededError) as info:
            other.create_topics([NewTopic(names[1], 1, 1)])
        print(f"kafka-python raised: {info.value}")
        assert "The throttling quota has been exceeded." in str(info.value)
    finally:
        admin.close()
        other.close()
        cleanup(kafka, names)


@pytest.mark.java
def test_java_admin_client_creates_topics_under_the_quota_on_its_own(proxy_factory, kafka) -> None:
    # rate 20 partitions/s, burst 50 (5 windows of 0.5 s); 10 topics x 20 partitions = 200.
    proxy = mutation_proxy(proxy_factory, kafka, rate=20, window_num=5, window_seconds=0.5)
    prefix = unique_topic("java")
    source = Path(__file__).resolve().parents[1] / "java" / "CreateTopicsUnderQuota.java"
    started = time.monotonic()
    result = subprocess.run(
        java_program(source, proxy.bootstrap, "java-admin", prefix, "10", "20"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - started
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        took_ms = int(result.stdout.split("created 10 topics in ")[1].split()[0])
        print(f"Java AdminClient: 10 x 20 partitions in {took_ms} ms (quota implies ~7500 ms); process {elapsed:.1f} s")
        # (200 - 50) / 20 = 7.5 s of quota; the client's own retry timing adds a little.
        assert 6000 <= took_ms <= 12000, result.stdout
    finally:
        cleanup(kafka, [f"{prefix}-{i}" for i in range(10)])


@pytest.mark.java
def test_java_admin_client_gets_the_quota_error_not_a_timeout_after_an_all_admitted_create(
    proxy_factory, kafka
) -> None:
    # The seed example: burst 500; 7 x 80 = 560 partitions all admitted (tokens -60, ~12 s of debt).
    # Had that response carried the throttle, the client would hold every request to the node for
    # ~12 s and the next create (5 s for the call) would time out instead.
    proxy = mutation_proxy(proxy_factory, kafka, rate=5, window_num=100)
    prefix = unique_topic("java-strict")
    source = Path(__file__).resolve().parents[1] / "java" / "CreateTopicsUnderQuota.java"
    command = java_program(source, proxy.bootstrap, "java-strict", prefix)
    result = subprocess.run(
        [*command, "7", "80", "then-one-more"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        print(result.stdout)
        assert "created 7 topics" in result.stdout
        assert "one more: ThrottlingQuotaExceededException" in result.stdout, result.stdout
    finally:
        cleanup(kafka, [f"{prefix}-{i}" for i in range(7)] + [f"{prefix}-late"])
