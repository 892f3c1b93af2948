"""What a request may make the session read before it is admitted or refused (issue 34): refuse
first, parse after. A version above the cap, or anything but SASL before authentication, refused from
a frame's first bytes; header tagged fields skipped by length and refused past a limit; one
connection's share of the partial-frame memory; decoding bounded by max_decoded_elements; the
proxy's own time for an exchange charged as the sender's request time.
"""

from __future__ import annotations

from dataclasses import replace
from struct import pack

import pytest
from kafka.protocol.admin import DescribeClientQuotasRequest

from quotagate.protocol.limits import MAX_TAGGED_FIELDS
from quotagate.proxy.metrics import BEFORE_AUTHENTICATION, DECODED_ELEMENTS_LIMIT, PARTIAL_FRAME_SHARE
from quotagate.proxy.quota_admin import QuotaAdmin
from tests.support import attack_frames
from tests.support.builds import Build
from tests.support.messages import create_topics_request, framed_request
from tests.support.sasl_messages import answer, authenticate, handshake, handshake_answer
from tests.support.session_double import (
    correlation_ids,
    metadata_answer,
    metadata_request,
    produce,
    produce_answer,
    services_for,
    taken,
)

SASL_REQUIRED = 'client_sasl = "required"\n'  # keys of [proxy] (session_double's PROXY)


# the session: refuse first ----------------------------------------------------------------------
def test_a_version_above_the_cap_is_refused_at_its_first_bytes_before_the_rest_arrives(build: Build) -> None:
    session, _ = build.session_with('client_sasl = "none"\n')  # no pre-authentication size limit
    frame = attack_frames.produce_with_tagged_header(38_000_000)
    session.client_data(frame[:65536], now=1.0)
    assert session.refusal is not None and "Produce v13 is above what ApiVersions offered" in session.refusal
    assert session.to_broker == [] and session.to_client == []
    assert session.services.partial_frames.used == 0, "nothing of it is held"


def metadata_v12(correlation_id: int, tags: bytes) -> bytes:
    """A Metadata v12 request (flexible header v2) with `tags` as its header's tagged fields."""
    header = attack_frames.header_v1(3, 12, correlation_id) + tags
    return attack_frames.framed(header + b"\x01" + b"\x00\x00" + b"\x00")  # no topics, two flags, no tags


def test_header_tagged_fields_are_skipped_by_length_and_refused_past_the_limit(build: Build) -> None:
    session, _ = build.session_with('client_sasl = "none"\n')
    three_large = attack_frames.uvarint(3) + b"".join(
        bytes([t]) + attack_frames.uvarint(3000) + b"x" * 3000 for t in range(3)
    )
    request = metadata_v12(1, three_large)
    session.client_data(request, now=1.0)
    assert taken(session.to_broker) == request
    many = attack_frames.uvarint(MAX_TAGGED_FIELDS + 1) + b"\x00\x00" * (MAX_TAGGED_FIELDS + 1)
    session.client_data(metadata_v12(2, many), now=1.0)
    assert session.refusal is not None and "tagged fields in the request header" in session.refusal
    assert session.to_broker == []


def describe_everything(correlation_id: int) -> bytes:
    return framed_request(DescribeClientQuotasRequest(version=1, components=[], strict=False), correlation_id)


def test_before_sasl_authentication_nothing_but_api_versions_and_sasl_is_read(build: Build) -> None:
    session, _ = build.session_with(SASL_REQUIRED)
    api_versions = attack_frames.framed(attack_frames.header_v1(18, 0, 1))
    session.client_data(api_versions + describe_everything(2), now=1.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1], "the describe goes nowhere"
    assert session.refusal is not None and "DescribeClientQuotas before SASL authentication" in session.refusal
    assert session.refusal_reason == BEFORE_AUTHENTICATION
    assert session.to_client == [] and session.awaiting_answers, "ApiVersions is answered first"


def test_a_large_frame_of_another_api_before_authentication_is_refused_at_its_header(build: Build) -> None:
    session, _ = build.session_with(SASL_REQUIRED)
    head = pack(">i", 400_000) + attack_frames.header_v1(3, 1, 1)  # within the 512 KiB limit
    session.client_data(head + b"\x00" * 1000, now=1.0)
    assert session.refusal_reason == BEFORE_AUTHENTICATION
    assert session.services.partial_frames.used == 0


def test_after_plain_authentication_requests_flow_and_the_limit_is_gone(build: Build) -> None:
    session, _ = build.session_with(SASL_REQUIRED)
    session.client_data(handshake(1, "PLAIN"), now=0.0)
    session.broker_data(handshake_answer(1), now=0.0)
    session.client_data(authenticate(2, b"\0alice\0alice-secret") + metadata_request(3), now=0.0)
    session.broker_data(answer(2), now=0.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1, 2, 3]
    assert session.refusal is None and session.receive_limit is None and session.user == "alice"


def test_a_request_before_a_plain_exchange_ends_is_the_brokers_to_answer_and_nothing_after_it_is_read(
    build: Build,
) -> None:
    """After a SaslHandshake the broker's authenticator answers any request but SaslAuthenticate with
    that API's error response (ILLEGAL_SASL_STATE) and closes: the proxy forwards it as it came, hooks
    nothing (DescribeClientQuotas is not the proxy's to answer here), and reads nothing after it."""
    services = services_for(SASL_REQUIRED)
    admin = QuotaAdmin(services.engine.table, {}, (), None, lambda quotas, now: None, "anyone")
    session = build.session(replace(services, quota_admin=admin))
    session.broker_connected(0.0)
    stray = framed_request(DescribeClientQuotasRequest(version=1, components=[], strict=False), 2)
    session.client_data(handshake(1, "PLAIN") + stray + metadata_request(3), now=0.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1, 2], "the stray as it came, nothing after it"
    assert session.refusal_reason == BEFORE_AUTHENTICATION and session.awaiting_answers
    illegal_sasl_state = pack(">i", 2) + b"\x00" + pack(">ih", 0, 34) + b"\x01\x00\x00"  # the broker's answer
    session.broker_data(handshake_answer(1) + pack(">i", len(illegal_sasl_state)) + illegal_sasl_state, now=0.0)
    assert correlation_ids(taken(session.to_client), 4) == [1, 2]
    assert not session.awaiting_answers, "answered: the connection closes, as the broker's does"


def test_after_a_successful_gssapi_round_the_first_other_request_ends_the_exchange(build: Build) -> None:
    """GSSAPI's end is opaque to the proxy: a request past a successful round is forwarded (the
    broker would have closed the connection had the exchange not ended), and lifts the limit."""
    session, _ = build.session_with(SASL_REQUIRED)
    session.client_data(handshake(1, "GSSAPI"), now=0.0)
    session.broker_data(handshake_answer(1), now=0.0)
    session.client_data(authenticate(2, b"kerberos-token"), now=0.0)
    session.broker_data(answer(2, auth_bytes=b"server-token"), now=0.0)
    session.client_data(metadata_request(3), now=0.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1, 2, 3]
    assert session.refusal is None and session.receive_limit is None


def test_a_frame_over_one_connections_share_is_refused_at_its_size(build: Build) -> None:
    session, _ = build.session_with("partial_frames_max_bytes = 100000\n")
    assert session.services.partial_frame_share == 50_000
    session.client_data(pack(">i", 40_000) + attack_frames.header_v1(3, 1, 1), now=0.0)
    assert session.refusal is None, "within the share: it waits for its bytes"
    other, _ = build.session_with("partial_frames_max_bytes = 100000\n")
    other.client_data(pack(">i", 60_000) + attack_frames.header_v1(3, 1, 1), now=0.0)
    assert other.refusal_reason == PARTIAL_FRAME_SHARE
    assert "proxy.partial_frames_max_bytes_per_connection" in other.refusal


def test_a_mutation_past_max_decoded_elements_is_refused_naming_the_key(build: Build) -> None:
    session, _ = build.session_with(
        'max_decoded_elements = 10\n[[quotas]]\nclient_id = "<default>"\ncontroller_mutation_rate = 100\n'
    )
    session.client_data(create_topics_request(20), now=0.0)
    assert session.refusal_reason == DECODED_ELEMENTS_LIMIT and "proxy.max_decoded_elements" in session.refusal
    assert session.to_broker == []


# the proxy's own time is request time -------------------------------------------------------------
class SteppingClock:
    """Each reading 5 ms after the last: whatever the proxy times takes 5 ms."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.005
        return self.now


def test_the_proxys_own_time_for_an_exchange_is_charged_to_the_senders_request_time(build: Build) -> None:
    services = services_for("", clock=SteppingClock())
    admin = QuotaAdmin(services.engine.table, {}, (), None, lambda quotas, now: None, "anyone")
    session = build.session(replace(services, quota_admin=admin))
    session.broker_connected(0.0)
    session.client_data(describe_everything(1), now=1.0)
    assert correlation_ids(taken(session.to_client), 4) == [1]
    stats = session.services.entity_metrics.stats[("ANONYMOUS", "app")]
    assert stats.request_seconds == pytest.approx(0.005), "a local answer: the proxy's time alone"
    session.client_data(metadata_request(2), now=2.0)
    assert correlation_ids(taken(session.to_broker), 8) == [2]
    session.broker_data(metadata_answer(2, {1: ("kafka-1", 9092)}), now=2.010)
    assert correlation_ids(taken(session.to_client), 4) == [2]
    assert stats.request_seconds == pytest.approx(0.005 + 0.010 + 0.005), "the broker's 10 ms and the rewrite's 5"


THRESHOLDS = "[topic_thresholds]\ntotal_bytes_in_per_sec = 1000\n[topic_thresholds.topics]\nbig = 100\n"


def test_a_produce_of_more_topics_than_max_decoded_elements_is_refused_where_thresholds_apply(build: Build) -> None:
    """Per-topic thresholds decode a produce's topic names: no more of them than max_decoded_elements."""
    session, _ = build.session_with("max_decoded_elements = 10\n" + THRESHOLDS)
    session.client_data(produce(1, {f"topic-{i}": b"" for i in range(11)}), now=0.0)
    assert session.refusal_reason == DECODED_ELEMENTS_LIMIT and "proxy.max_decoded_elements" in session.refusal
    assert session.to_broker == []
    within, _ = build.session_with("max_decoded_elements = 10\n" + THRESHOLDS)
    within.client_data(produce(1, {f"topic-{i}": b"" for i in range(10)}), now=0.0)
    assert within.refusal is None and taken(within.to_broker), "within the limit: forwarded"


def test_a_threshold_refusal_grows_with_the_refused_partitions_not_with_their_square(build: Build) -> None:
    """Each refused partition says why its own topic was refused: a message naming every refused topic,
    repeated in every partition, made 2 000 refused topics a 2 000 x 60 kB answer."""
    topics = "\n".join(f'"t{i}" = 1' for i in range(2000))
    session, _ = build.session_with(THRESHOLDS.replace("= 1000", "= 10000").replace("big = 100", topics))
    flood = {f"t{i}": b"x" * 20 for i in range(2000)}  # every topic over its own, and the total over its own
    session.client_data(produce(1, {**flood, "t0": b"b" * 120_000}), now=0.0)
    session.broker_data(produce_answer(1, list(flood)), now=0.0)
    taken(session.to_broker), taken(session.to_client)
    session.unmute(now=session.muted_until)
    session.client_data(produce(2, flood), now=session.muted_until)
    answer = taken(session.to_client)
    assert session.to_broker == [] and answer, "every topic refused: the proxy answers"
    assert len(answer) < 2000 * 200, f"{len(answer)} bytes for 2 000 refused partitions"
