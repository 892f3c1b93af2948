"""Fetches under a consumer quota, as the broker takes them (issue 37 item 3): bytes in, bytes out.

- A fetch that arrives while its client would be throttled gets no data, at once, with the throttle
  (KIP-219, FetchContext.getThrottledResponse): a full or sessionless one is answered by the proxy
  (session id 0, nothing forwarded); an incremental one reaches the broker, so that its session takes
  the request and moves to its next epoch as the client's does, and the broker's answer is emptied.
- A fetch's max_bytes is capped at what the quota allows in the window but the current sample
  (KAFKA-9677): rate x (quota_window_num - 1) x quota_window_size_seconds, patched in a copy of the
  frame; every other byte is the client's.
"""

from __future__ import annotations

from struct import unpack_from

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from quotagate.protocol.headers import response_body_offset
from tests.support.builds import Build
from tests.support.session_double import frames, taken

QUOTA = 50_000  # consumer_byte_rate: the cap is 50 000 x (11 - 1) x 1 s
CAP = 500_000
CONSUMER = f'[[quotas]]\nclient_id = "app"\nconsumer_byte_rate = {QUOTA}\n'


def fetch(correlation_id: int, version: int = 12, epoch: int = -1, session: int = 0, max_bytes: int = 52_428_800,
          replica_id: int = -1) -> bytes:  # fmt: skip
    topic = FetchRequest.FetchTopic
    partition = topic.FetchPartition(
        version=version, partition=0, current_leader_epoch=-1, fetch_offset=42, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1_048_576,
    )  # fmt: skip
    name = {"topic": "t"} if version < 13 else {"topic_id": "0" * 32}
    fields = {"replica_id": replica_id} if version < 15 else {}
    request = FetchRequest(
        version=version, max_wait_ms=500, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
        session_id=session, session_epoch=epoch, topics=[topic(version=version, partitions=[partition], **name)],
        forgotten_topics_data=[], rack_id="", **fields,
    )  # fmt: skip
    request.with_header(correlation_id=correlation_id, client_id="app")
    return bytes(request.encode(header=True, framed=True))


def fetched(correlation_id: int, records: int, version: int = 12, session: int = 0, error: int = 0) -> bytes:
    """The broker's answer: one partition holding `records` bytes."""
    data = FetchResponse.FetchableTopicResponse.PartitionData(
        version=version, partition_index=0, error_code=0, high_watermark=100, last_stable_offset=100,
        log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1, records=b"r" * records,
    )  # fmt: skip
    name = {"topic": "t"} if version < 13 else {"topic_id": "0" * 32}
    response = FetchResponse(
        version=version, throttle_time_ms=0, error_code=error, session_id=session,
        responses=[] if error else [FetchResponse.FetchableTopicResponse(version=version, partitions=[data], **name)],
    )  # fmt: skip
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def decoded_request(frame: bytes, version: int) -> FetchRequest:
    return FetchRequest.decode(frame[4:], version=version, header=True)


def decoded_response(frame: bytes, version: int):  # type: ignore[no-untyped-def]
    view = memoryview(frame)
    return FetchResponse.decode(view[response_body_offset(view, 1, version) :], version=version)


def in_debt(build: Build, toml: str = CONSUMER):  # type: ignore[no-untyped-def]
    """A session whose entity a large fetch answer left in debt: (session, the time it happened)."""
    session, _ = build.session_with(toml)
    session.client_data(fetch(1, max_bytes=100), now=1.0)
    taken(session.to_broker)
    session.broker_data(fetched(1, 3 * CAP), now=1.0)  # 1.5 MB against a 550 kB burst: ~19 s of debt
    taken(session.to_client)
    assert session.muted_until > 15
    return session


@pytest.mark.parametrize("version", [4, 11, 12, 15])
def test_a_fetch_asking_for_more_than_one_window_of_the_quota_is_capped_and_nothing_else_changes(
    build: Build, version: int
) -> None:
    session, _ = build.session_with(CONSUMER)
    sent = fetch(1, version=version)
    session.client_data(sent, now=0.0)
    forwarded = taken(session.to_broker)
    assert decoded_request(forwarded, version).max_bytes == CAP
    assert len(forwarded) == len(sent)
    assert forwarded.replace(CAP.to_bytes(4, "big"), (52_428_800).to_bytes(4, "big"), 1) == sent


@pytest.mark.parametrize(
    ("toml", "max_bytes"),
    [
        ("", 52_428_800),  # no quota at all
        ('[[quotas]]\nclient_id = "app"\nproducer_byte_rate = 1000\n', 52_428_800),  # none on fetches
        (f'[[quotas]]\nclient_id = "app"\nconsumer_byte_rate = {QUOTA}\nshadow = true\n', 52_428_800),  # tried only
        (CONSUMER, CAP),  # within the cap already
    ],
    ids=["no-quota", "producer-only", "shadow", "within"],
)
def test_a_fetch_with_no_binding_consumer_quota_or_within_the_cap_goes_as_it_came(
    build: Build, toml: str, max_bytes: int
) -> None:
    session, _ = build.session_with(toml)
    sent = fetch(1, max_bytes=max_bytes)
    session.client_data(sent, now=0.0)
    assert taken(session.to_broker) == sent


def test_a_followers_fetch_is_never_capped(build: Build) -> None:
    session, _ = build.session_with(CONSUMER)
    sent = fetch(1, replica_id=1)
    session.client_data(sent, now=0.0)
    assert taken(session.to_broker) == sent


def test_kafka_caps_at_one_window_when_the_quota_has_a_single_window(build: Build) -> None:
    session, _ = build.session_with(CONSUMER, top_level="quota_window_num = 1\n")
    session.client_data(fetch(1), now=0.0)
    assert decoded_request(taken(session.to_broker), 12).max_bytes == QUOTA


@pytest.mark.parametrize(
    ("version", "epoch"), [(4, -1), (11, -1), (12, 0), (15, 0)], ids=["v4", "v11-sessionless", "v12-full", "v15-full"]
)
def test_a_full_or_sessionless_fetch_arriving_while_throttled_is_answered_empty_at_once_by_the_proxy(
    build: Build, version: int, epoch: int
) -> None:
    session = in_debt(build)
    second = type(session)(session.services)  # the same client's connection to another broker
    second.broker_connected(0.0)
    second.client_data(fetch(7, version=version, epoch=epoch, session=33 if epoch == 0 else 0), now=2.0)
    assert taken(second.to_broker) == b"", "nothing reaches the broker"
    (answer,) = frames(taken(second.to_client))
    assert unpack_from(">i", answer, 4)[0] == 7
    response = decoded_response(answer, version)
    assert response.responses == []
    assert 15_000 < response.throttle_time_ms < 20_000
    if version >= 7:
        assert (response.error_code, response.session_id) == (0, 0)
    assert second.muted_until == pytest.approx(2.0 + response.throttle_time_ms / 1000, abs=0.01)


@pytest.mark.parametrize("version", [11, 12, 15])
def test_an_incremental_fetch_arriving_while_throttled_reaches_the_broker_and_its_answer_is_emptied(
    build: Build, version: int
) -> None:
    session = in_debt(build)
    second = type(session)(session.services)
    second.broker_connected(0.0)
    sent = fetch(8, version=version, epoch=5, session=77)
    second.client_data(sent, now=2.0)
    forwarded = decoded_request(taken(second.to_broker), version)
    assert (forwarded.session_id, forwarded.session_epoch) == (77, 5), "the broker's session takes it"
    assert (forwarded.max_wait_ms, forwarded.min_bytes, forwarded.max_bytes) == (0, 0, 0), "answered at once, small"
    assert forwarded.topics == decoded_request(sent, version).topics
    assert second.muted_until > 2.0
    second.broker_data(fetched(8, 20_000, version=version, session=77), now=2.01)
    (answer,) = frames(taken(second.to_client))
    response = decoded_response(answer, version)
    assert (response.error_code, response.session_id, response.responses) == (0, 77, [])
    assert 15_000 < response.throttle_time_ms < 20_000
    # The broker's answer is not charged: the client got none of it.
    assert second.entity_buckets.fetch.throttle_ms(2.01) < 20_000


def test_a_session_error_from_the_broker_reaches_the_client_in_the_emptied_answer(build: Build) -> None:
    session = in_debt(build)
    second = type(session)(session.services)
    second.broker_connected(0.0)
    second.client_data(fetch(9, epoch=5, session=77), now=2.0)
    taken(second.to_broker)
    second.broker_data(fetched(9, 0, session=0, error=71), now=2.01)  # INVALID_FETCH_SESSION_EPOCH
    (answer,) = frames(taken(second.to_client))
    response = decoded_response(answer, 12)
    assert (response.error_code, response.session_id, response.responses) == (71, 0, [])
    assert response.throttle_time_ms > 0


def test_a_fetch_after_the_debt_is_paid_gets_its_data(build: Build) -> None:
    session = in_debt(build)
    now = session.muted_until + 1.0  # the debt paid, and a second of quota earned
    session.unmute(now)
    session.client_data(fetch(2, epoch=1, session=77), now=now)
    forwarded = decoded_request(taken(session.to_broker), 12)
    assert (forwarded.max_wait_ms, forwarded.max_bytes) == (500, CAP)
    session.broker_data(fetched(2, 1000, session=77), now=now)
    response = decoded_response(frames(taken(session.to_client))[0], 12)
    assert len(response.responses) == 1 and response.throttle_time_ms == 0
