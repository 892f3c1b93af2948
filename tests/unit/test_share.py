"""Share groups (KIP-932): the ShareFetch and ShareAcknowledge rewriters, the ShareFetch long-poll peek,
and what a share fetch costs.

The golden bodies below are what Kafka 4.2's own ShareFetchResponseData / ShareAcknowledgeResponseData
encode (tests/java/ShareResponseBytes.java prints them; a java-marked test checks they still match):
one topic, partition 0 with one record and one acquired batch, partition 1 answered
NOT_LEADER_OR_FOLLOWER (6), and NodeEndpoints naming its leader, node 2 at kafka-2.internal:9092.
"""

from __future__ import annotations

from struct import pack, unpack_from

import pytest

from quotagate.protocol.apis import ApiKey, is_flexible, response_header_is_flexible
from quotagate.protocol.framing import FrameError
from quotagate.protocol.rewrite import RESPONSE_REWRITERS, response_rewriters
from quotagate.protocol.share import share_fetch_max_wait_ms, share_response_node_endpoints
from quotagate.quotas import ANONYMOUS
from quotagate.quotas.apis import policy
from quotagate.quotas.charging import request_time_ms
from tests.support.builds import Build
from tests.support.messages import compact, request_header, share_response_body
from tests.support.rewrite_messages import PROXY_HOST, Recorder
from tests.support.session_double import taken
from tests.support.share_messages import CORRELATION_ID, GOLDEN, response_frame, share_fetch_request

# The record batch of partition 0 in the golden ShareFetch bodies (one record, key "key", value "value").
GOLDEN_RECORDS = bytes.fromhex(
    "000000000000000000000040ffffffff02943629b5000000000000ffffffffffffffffffffffffffffffffffffffffff"
    "ffffffffffffffffff000000011c000000066b65790a76616c756500"
)
VERSIONS = [(api_key, version) for api_key in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE) for version in (1, 2)]


def golden_like(api_key: int, version: int, endpoints: list[tuple[int, str, int, str | None]], **kwargs) -> bytes:
    """The golden body's content, encoded by tests/support/messages.py, with other endpoints if asked."""
    partitions = [(0, 0, None, GOLDEN_RECORDS), (1, 6, "not the leader", b"")]
    if api_key == ApiKey.SHARE_ACKNOWLEDGE:
        partitions = [(1, 6, None, b"")]
    return share_response_body(api_key, version, partitions, endpoints, **kwargs)


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_the_test_encoder_writes_the_bytes_kafka_writes(api_key: int, version: int) -> None:
    rack = "rack-b" if api_key == ApiKey.SHARE_FETCH else None
    assert golden_like(api_key, version, [(2, "kafka-2.internal", 9092, rack)]) == GOLDEN[(api_key, version)]


def test_share_apis_are_flexible_in_every_version() -> None:
    for api_key in (76, 77, 78, 79):
        assert is_flexible(api_key, 1) and response_header_is_flexible(api_key, 1)
    assert not is_flexible(40, 1) and is_flexible(40, 2)  # ExpireDelegationToken: flexible from v2
    assert is_flexible(94, 0)  # UnregisterController (4.4): flexible from its first version
    assert not is_flexible(95, 0)  # not a Kafka API


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_node_endpoints_get_proxy_addresses_and_the_rest_is_kept_byte_for_byte(api_key: int, version: int) -> None:
    body = GOLDEN[(api_key, version)]
    recorder = Recorder()
    out = RESPONSE_REWRITERS[api_key](response_frame(api_key, body), version, recorder)
    assert out is not None
    view = memoryview(out)
    assert unpack_from(">i", view, 0)[0] == len(view) - 4
    assert unpack_from(">i", view, 4)[0] == CORRELATION_ID
    assert recorder.seen == {2: ("kafka-2.internal", 9092)}
    addresses, _edits = share_response_node_endpoints(view, 9, api_key, version)
    assert addresses == [(2, PROXY_HOST.encode(), 20002)]
    rack = "rack-b" if api_key == ApiKey.SHARE_FETCH else None
    assert bytes(view[9:]) == golden_like(api_key, version, [(2, PROXY_HOST, 20002, rack)]), (
        "only the hosts and ports change: everything before NodeEndpoints, the racks and the tags are kept"
    )


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_a_response_that_names_no_broker_is_forwarded_untouched(api_key: int, version: int) -> None:
    body = golden_like(api_key, version, [], topics=3)
    assert RESPONSE_REWRITERS[api_key](response_frame(api_key, body), version, Recorder()) is None
    assert response_rewriters()[api_key](response_frame(api_key, body), version, Recorder()) is None


def test_several_endpoints_and_unknown_top_level_tags_survive() -> None:
    endpoints = [(1, "a", 1, None), (2, "b" * 200, 2, "r"), (3, "c", 3, "")]
    tags = b"\x01\x05\x02hi"  # one unknown tagged field (tag 5, 2 bytes)
    body = golden_like(ApiKey.SHARE_FETCH, 2, endpoints, topics=2, tags=tags)
    out = RESPONSE_REWRITERS[ApiKey.SHARE_FETCH](response_frame(ApiKey.SHARE_FETCH, body), 2, Recorder())
    assert out is not None
    expected = [(n, PROXY_HOST, 20000 + n, rack) for n, _, _, rack in endpoints]
    assert bytes(out[9:]) == golden_like(ApiKey.SHARE_FETCH, 2, expected, topics=2, tags=tags)


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_a_response_that_is_not_what_the_schema_says_is_a_frame_error(api_key: int, version: int) -> None:
    body = GOLDEN[(api_key, version)]
    for bad in (body[:-1], body + b"\x00", body[: len(body) // 2], b""):
        with pytest.raises(FrameError):
            RESPONSE_REWRITERS[api_key](response_frame(api_key, bad), version, Recorder())


def test_a_share_fetch_announcing_two_billion_partitions_is_refused_at_once() -> None:
    body = pack(">ih", 0, 0) + b"\x00" + pack(">i", 0) + b"\x02" + bytes(16) + b"\xff\xff\xff\xff\x07" + bytes(40)
    with pytest.raises(FrameError):
        RESPONSE_REWRITERS[ApiKey.SHARE_FETCH](response_frame(ApiKey.SHARE_FETCH, body), 1, Recorder())


@pytest.mark.parametrize("version", [1, 2])
def test_a_share_fetch_says_how_long_it_may_wait_at_the_broker(version: int) -> None:
    frame = memoryview(share_fetch_request(1, 500, version))
    assert share_fetch_max_wait_ms(frame, request_header(frame).body_offset, version) == 500
    with pytest.raises(FrameError):
        share_fetch_max_wait_ms(frame[:30], request_header(frame).body_offset, version)


def test_a_share_fetch_is_not_charged_its_long_poll_wait() -> None:
    assert request_time_ms(policy(ApiKey.SHARE_FETCH), latency_ms=503.0, fetch_max_wait_ms=500) == pytest.approx(3.0)
    assert request_time_ms(policy(ApiKey.SHARE_ACKNOWLEDGE), latency_ms=503.0, fetch_max_wait_ms=500) == 503.0


def share_fetch_answer(correlation_id: int, records: bytes) -> bytes:
    body = share_response_body(ApiKey.SHARE_FETCH, 2, [(0, 0, None, records)], [])
    payload = pack(">i", correlation_id) + b"\x00" + body
    return pack(">i", len(payload)) + payload


def test_a_share_fetch_response_is_charged_to_consumer_byte_rate_and_carries_the_throttle(build: Build) -> None:
    # Burst: 10 kB/s × 11 windows = 110 kB, so a 300 kB response leaves ~190 kB of debt, ~19 s.
    session, _ = build.session_with('[[quotas]]\nclient_id = "app"\nconsumer_byte_rate = 10000\n')
    session.client_data(share_fetch_request(3, 500), now=5.0)
    assert taken(session.to_broker) == share_fetch_request(3, 500)
    session.broker_data(share_fetch_answer(3, b"r" * 300_000), now=5.0)
    answer = taken(session.to_client)
    assert unpack_from(">i", answer, 4)[0] == 3
    assert 18_000 < unpack_from(">i", answer, 9)[0] < 20_000, "throttle_time_ms of the ShareFetch response"
    assert 23.0 < session.muted_until < 25.0
    # Muted: the next request waits for the throttle to end, as after a Fetch.
    session.client_data(share_fetch_request(4, 500), now=6.0)
    assert taken(session.to_broker) == b""
    session.unmute(now=session.muted_until)
    assert taken(session.to_broker) == share_fetch_request(4, 500)


def test_a_share_acknowledge_counts_for_request_percentage_only(build: Build) -> None:
    session, engine = build.session_with(
        '[[quotas]]\nclient_id = "app"\nconsumer_byte_rate = 10\nrequest_percentage = 1\n'
    )
    header = pack(">hhih", ApiKey.SHARE_ACKNOWLEDGE, 2, 8, 3) + b"app" + b"\x00"
    body = compact("group") + compact("member-1") + pack(">i", 1) + b"\x00" + b"\x01\x00"
    session.client_data(pack(">i", len(header) + len(body)) + header + body, now=1.0)
    taken(session.to_broker)
    answer = share_response_body(ApiKey.SHARE_ACKNOWLEDGE, 2, [(0, 0, None, b"")], [])
    payload = pack(">i", 8) + b"\x00" + answer
    session.broker_data(pack(">i", len(payload)) + payload, now=1.5)  # 500 ms of request time
    buckets = engine.entity_buckets(ANONYMOUS, "app", 1.5)
    assert buckets.fetch is not None and buckets.fetch.tokens == buckets.fetch.burst, "no bytes charged"
    assert buckets.request is not None and buckets.request.tokens < buckets.request.burst
