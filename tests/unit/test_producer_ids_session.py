"""producer_ids_rate (KIP-936) through the sans-IO session: a new producer ID over the rate is
answered by the proxy (every partition THROTTLING_QUOTA_EXCEEDED, a throttle, nothing forwarded);
seen IDs pass; without the quota, Produce keeps the core's fast path."""

from __future__ import annotations

from struct import pack

import pytest
from kafka.protocol.producer import ProduceResponse

from quotagate.protocol.produce import produce_producer_id
from quotagate.proxy.session import PRODUCER_IDS_ERROR
from quotagate.quotas import QuotaTable
from quotagate.quotas.apis import NEW_PRODUCER_IDS as PRODUCER_IDS
from tests.support.builds import Build
from tests.support.messages import request_header
from tests.support.session_double import frames, produce, produce_answer, taken

QUOTA = '[[quotas]]\nuser = "<default>"\nproducer_ids_rate = 1\n'
ONE_SECOND_BURST = "quota_window_num = 1\nquota_window_size_seconds = 1\n"


def batch(producer_id: int) -> bytes:
    """A RecordBatch v2 header (no records) from `producer_id`: what the proxy reads of a batch."""
    return pack(">qiibIhiqq", 0, 49, 0, 2, 0, 0, 0, 0, 0) + pack(">qhii", producer_id, 0, 0, 0)


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_the_first_batchs_producer_id_is_read_without_the_records(version: int) -> None:
    frame = memoryview(produce(1, {"a": b"", "b": batch(4242) + b"r" * 100}, version=version))
    header = request_header(frame)
    assert produce_producer_id(frame, header.body_offset, version) == 4242
    frame = memoryview(produce(1, {"a": b"x" * 10}, version=version))  # not a v2 batch: no ID
    assert produce_producer_id(frame, request_header(frame).body_offset, version) == -1


def test_produce_is_hooked_only_when_a_producer_ids_rate_is_set(build: Build) -> None:
    without, _ = build.session_with('[[quotas]]\nuser = "<default>"\nproducer_byte_rate = 1000\n')
    with_quota, _ = build.session_with(QUOTA)
    assert not without.hooked & PRODUCER_IDS
    assert with_quota.hooked & PRODUCER_IDS


def test_a_new_producer_id_over_the_rate_is_refused_and_seen_ones_pass(build: Build) -> None:
    session, engine = build.session_with(QUOTA, ONE_SECOND_BURST)
    # Burst 1: the first new ID is admitted (leaving the bucket at 0), the second too (strict: not
    # in debt before it), the third is refused.
    for correlation_id, producer_id in ((1, 100), (2, 101)):
        session.client_data(produce(correlation_id, {"t": batch(producer_id)}), now=0.0)
        assert len(frames(taken(session.to_broker))) == 1
        session.broker_data(produce_answer(correlation_id, ["t"]), now=0.0)
        taken(session.to_client)
    session.client_data(produce(3, {"t": batch(102), "u": batch(102)}), now=0.0)
    assert taken(session.to_broker) == b""  # nothing forwarded, nothing appended
    (answer,) = frames(taken(session.to_client))
    response = ProduceResponse.decode(answer[8:], version=8)
    assert [(t.name, [p.error_code for p in t.partition_responses]) for t in response.responses] == [
        ("t", [PRODUCER_IDS_ERROR]),
        ("u", [PRODUCER_IDS_ERROR]),
    ]
    assert response.throttle_time_ms == 1000  # one ID of debt at 1/s
    assert session.muted_until == pytest.approx(1.0)
    assert session.services.metrics.producer_id_refusals_total._value.get() == 1
    # A seen ID passes even while the bucket is in debt (the mute is the client's to keep); the
    # refused one, retried, is new again.
    assert engine.admit_producer_id("ANONYMOUS", "app", 100, 0.5) == 0
    session.unmute(now=1.0)
    session.client_data(produce(4, {"t": batch(100)}), now=1.0)
    assert len(frames(taken(session.to_broker))) == 1
    session.broker_data(produce_answer(4, ["t"]), now=1.0)
    taken(session.to_client)
    session.client_data(produce(5, {"t": batch(102)}), now=2.5)
    assert len(frames(taken(session.to_broker))) == 1
    assert engine.producer_ids.size_bytes == 2158  # one entity, one filter for 1 801 IDs (1/s × 30 min + 1)


def test_non_idempotent_produces_are_never_counted(build: Build) -> None:
    session, _ = build.session_with(QUOTA, ONE_SECOND_BURST)
    for correlation_id in range(1, 20):
        session.client_data(produce(correlation_id, {"t": batch(-1)}), now=0.0)
        assert len(frames(taken(session.to_broker))) == 1
        session.broker_data(produce_answer(correlation_id, ["t"]), now=0.0)
        taken(session.to_client)


def test_a_producer_sending_its_one_id_is_checked_against_the_filters_once_per_half_window(build: Build) -> None:
    session, engine = build.session_with(QUOTA, "producer_id_quota_window_size_seconds = 10\n")
    calls: list[float] = []
    admit = engine.admit_producer_id

    def counted(user: str, client_id: str, producer_id: int, now: float) -> int:
        calls.append(now)
        return admit(user, client_id, producer_id, now)

    engine.admit_producer_id = counted  # type: ignore[method-assign]
    for correlation_id, now in enumerate((0.0, 1.0, 4.9, 5.0, 9.0, 30.0), start=1):
        session.client_data(produce(correlation_id, {"t": batch(100)}), now=now)
        assert len(frames(taken(session.to_broker))) == 1
        session.broker_data(produce_answer(correlation_id, ["t"]), now=now)
        taken(session.to_client)
    assert calls == [0.0, 5.0, 30.0]
    engine.update(engine.table, engine.windows, 30.5)  # a reload: checked again
    session.client_data(produce(9, {"t": batch(100)}), now=30.5)
    assert calls == [0.0, 5.0, 30.0, 30.5]


def test_open_sessions_follow_a_producer_ids_rate_added_or_removed_live(build: Build) -> None:
    session, engine = build.session_with('[[quotas]]\nuser = "<default>"\nproducer_byte_rate = 1000\n')
    assert not session.hooked & PRODUCER_IDS
    with_quota = build.session_with(QUOTA)[1].table
    engine.update(with_quota, engine.windows, 1.0)
    session.quotas_changed()
    assert session.hooked & PRODUCER_IDS
    engine.update(QuotaTable(), engine.windows, 2.0)
    session.quotas_changed()
    assert not session.hooked & PRODUCER_IDS
