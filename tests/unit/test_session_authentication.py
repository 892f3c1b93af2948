"""Who a session charges: the user the broker accepted, after it said so; never a refused claim.

Tables of bytes in -> bytes out, as in test_session.py: a client that writes SaslHandshake,
SaslAuthenticate and a produce in one write has the produce held until the broker's answer, then
charged to the user that answer established (issue 12 item 1); PLAIN, SCRAM's two rounds and
OAUTHBEARER (and its JSON error challenge) each end the exchange where the broker does.
"""

from __future__ import annotations

import base64
import json
from struct import pack

import pytest

from quotagate.protocol.sasl import exchange_complete, jws_claim, user_from_auth_bytes
from quotagate.proxy.metrics import SASL_RECEIVE_LIMIT
from quotagate.proxy.session import Session
from quotagate.quotas import ANONYMOUS
from tests.support.builds import Build
from tests.support.sasl_messages import answer, authenticate, handshake, handshake_answer
from tests.support.session_double import correlation_ids, produce, produce_answer, taken

ALICE_QUOTA = '[[quotas]]\nuser = "alice"\nproducer_byte_rate = 1000\n'


def unsecured_jws(claims: dict[str, object]) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(claims)}."


def oauth_first(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_a_produce_written_with_the_authentication_waits_for_its_answer_and_is_charged_to_that_user(
    build: Build,
) -> None:
    session, _ = build.session_with(ALICE_QUOTA)
    session.client_data(handshake(1, "PLAIN"), now=0.0)
    session.broker_data(handshake_answer(1), now=0.0)
    taken(session.to_broker), taken(session.to_client)
    # One write: the authentication and a 20 kB produce (alice's burst is 11 kB).
    session.client_data(authenticate(2, b"\0alice\0alice-secret") + produce(3, {"t": b"r" * 20_000}), now=1.0)
    assert correlation_ids(taken(session.to_broker), 8) == [2], "the produce must wait for the answer"
    assert session.holding and session.user == ANONYMOUS
    session.broker_data(answer(2), now=1.0)
    assert session.user == "alice"
    assert correlation_ids(taken(session.to_broker), 8) == [3]
    assert session.muted_until > 1.0, "alice's produce put her in debt: the connection is muted"
    charged = {user for (user, _client_id), _stats in session.services.entity_metrics.ranked()[0]}
    assert "alice" in charged


def test_a_refused_authentication_charges_nothing_to_the_user_it_claimed(build: Build) -> None:
    session, _ = build.session_with(ALICE_QUOTA)
    session.client_data(handshake(1, "PLAIN"), now=0.0)
    session.broker_data(handshake_answer(1), now=0.0)
    taken(session.to_broker)
    session.client_data(authenticate(2, b"\0alice\0wrong") + produce(3, {"t": b"r" * 20_000}), now=1.0)
    assert correlation_ids(taken(session.to_broker), 8) == [2]
    session.broker_data(answer(2, error_code=58), now=1.0)  # SASL_AUTHENTICATION_FAILED; the broker closes
    assert session.user == ANONYMOUS
    assert not session.to_broker, "the produce after a refused authentication is never forwarded"
    session.client_data(produce(4, {"t": b"r"}), now=2.0)
    assert not session.to_broker, "nor anything the client writes after it"
    assert session.muted_until == 0.0
    charged = {user for (user, _client_id), _stats in session.services.entity_metrics.ranked()[0]}
    assert "alice" not in charged


def test_scram_is_adopted_at_the_server_final_message_not_at_the_first_round(build: Build) -> None:
    session, _ = build.session_with(ALICE_QUOTA)
    session.client_data(handshake(1, "SCRAM-SHA-256"), now=0.0)
    session.broker_data(handshake_answer(1), now=0.0)
    session.client_data(authenticate(2, b"n,,n=alice,r=nonce"), now=0.0)
    session.broker_data(answer(2, auth_bytes=b"r=nonce123,s=c2FsdA==,i=4096"), now=0.0)
    assert session.user == ANONYMOUS, "a server-first message says nothing about the proof yet"
    session.client_data(authenticate(3, b"c=biws,r=nonce123,p=proof"), now=0.0)
    session.broker_data(answer(3, auth_bytes=b"v=signature"), now=0.0)
    assert session.user == "alice"


def test_a_rejected_oauthbearer_token_is_not_adopted_at_its_error_challenge(build: Build) -> None:
    session, _ = build.session_with()
    session.client_data(handshake(1, "OAUTHBEARER"), now=0.0)
    session.broker_data(handshake_answer(1), now=0.0)
    session.client_data(authenticate(2, oauth_first(unsecured_jws({"sub": "alice"}))), now=0.0)
    session.broker_data(answer(2, auth_bytes=b'{"status":"invalid_token"}'), now=0.0)
    assert session.user == ANONYMOUS
    session.client_data(authenticate(3, b"\x01"), now=0.0)
    session.broker_data(answer(3, error_code=58), now=0.0)
    assert session.user == ANONYMOUS


def test_an_accepted_oauthbearer_token_names_the_user_by_its_principal_claim(build: Build) -> None:
    session, _ = build.session_with()
    session.client_data(handshake(1, "OAUTHBEARER"), now=0.0)
    session.broker_data(handshake_answer(1), now=0.0)
    session.client_data(authenticate(2, oauth_first(unsecured_jws({"sub": "alice", "exp": 9e9}))), now=0.0)
    session.broker_data(answer(2), now=0.0)
    assert session.user == "alice"


def test_reauthentication_as_another_user_moves_the_connection_to_their_buckets(build: Build) -> None:
    session, _ = build.session_with(ALICE_QUOTA)
    for correlation_id, user in ((1, "bob"), (3, "alice")):
        session.client_data(handshake(correlation_id, "PLAIN"), now=0.0)
        session.broker_data(handshake_answer(correlation_id), now=0.0)
        session.client_data(authenticate(correlation_id + 1, f"\0{user}\0pw".encode()), now=0.0)
        session.broker_data(answer(correlation_id + 1), now=0.0)
        assert session.user == user
    taken(session.to_broker), taken(session.to_client)
    session.client_data(produce(5, {"t": b"r" * 20_000}), now=1.0)
    assert session.muted_until > 1.0, "after re-authenticating as alice, alice's quota holds"
    session.broker_data(produce_answer(5, ["t"]), now=1.0)


def test_a_certificate_principal_is_the_user_until_sasl_says_otherwise(build: Build) -> None:
    session = build.session(build.session_with(ALICE_QUOTA)[0].services, principal="alice")
    session.broker_connected(0.0)
    session.client_data(produce(1, {"t": b"r" * 20_000}), now=1.0)
    assert session.user == "alice" and session.muted_until > 1.0


@pytest.mark.parametrize(
    ("claims", "claim", "user"),
    [
        ({"sub": "alice"}, "sub", "alice"),
        ({"sub": "svc-123", "preferred_username": "alice"}, "preferred_username", "alice"),
        ({"sub": 42}, "sub", None),
        ({}, "sub", None),
    ],
)
def test_the_oauthbearer_user_is_the_configured_claim(claims: dict[str, object], claim: str, user: str | None) -> None:
    assert user_from_auth_bytes("OAUTHBEARER", oauth_first(unsecured_jws(claims)), claim) == user
    assert jws_claim("not-a-jws", claim) is None


@pytest.mark.parametrize(
    ("mechanism", "server_bytes", "complete"),
    [
        ("PLAIN", b"", True),
        ("SCRAM-SHA-512", b"r=abc,s=c2FsdA==,i=4096", False),
        ("SCRAM-SHA-512", b"v=abc", True),
        ("OAUTHBEARER", b"", True),
        ("OAUTHBEARER", b'{"status":"invalid_token"}', False),
        ("GSSAPI", b"", False),
    ],
)
def test_an_exchange_ends_where_the_broker_ends_it(mechanism: str, server_bytes: bytes, complete: bool) -> None:
    assert exchange_complete(mechanism, server_bytes) is complete


# sasl.server.max.receive.size: what a client may make the proxy hold before it authenticates ------

LIMIT = 524_288  # the broker's default, and the proxy's


def big_produce(correlation_id: int) -> bytes:
    return produce(correlation_id, {"t": b"r" * (LIMIT + 1000)})


def plain_handshake_done(build: Build, authenticated: bool = False) -> Session:
    """A session past a PLAIN SaslHandshake (correlation id 1), and alice's success (2) if asked."""
    session, _ = build.session_with()
    session.client_data(handshake(1, "PLAIN"), now=0.0)
    session.broker_data(handshake_answer(1), now=0.0)
    if authenticated:
        session.client_data(authenticate(2, b"\0alice\0alice-secret"), now=0.0)
        session.broker_data(answer(2), now=0.0)
    taken(session.to_broker), taken(session.to_client)
    return session


def test_a_frame_over_the_limit_before_authentication_is_refused_at_its_size_prefix(build: Build) -> None:
    session, _ = build.session_with()
    session.client_data(pack(">i", 90 * 1024 * 1024) + pack(">hhih", 17, 1, 1, 3) + b"app", now=0.0)
    assert session.refusal_reason == SASL_RECEIVE_LIMIT, session.refusal
    assert session.client_frames.buffered == 0 and not session.to_broker, "nothing held, nothing forwarded"
    assert session.services.metrics.frames_refused_total.labels(SASL_RECEIVE_LIMIT)._value.get() == 1


def test_an_authenticate_over_the_limit_is_refused_after_the_handshake_before_it_is_answered(build: Build) -> None:
    session, _ = build.session_with()
    session.client_data(handshake(1, "PLAIN") + authenticate(2, b"\0alice\0" + b"x" * LIMIT), now=0.0)
    assert correlation_ids(taken(session.to_broker), 8) == [1]
    assert session.refusal_reason == SASL_RECEIVE_LIMIT and session.awaiting_answers
    session.broker_data(handshake_answer(1), now=0.0)
    assert correlation_ids(taken(session.to_client), 4) == [1] and not session.awaiting_answers


def test_after_authentication_frames_up_to_max_frame_size_pass(build: Build) -> None:
    session = plain_handshake_done(build, authenticated=True)
    session.client_data(big_produce(3), now=0.0)
    assert session.refusal is None and correlation_ids(taken(session.to_broker), 8) == [3]


def test_a_big_produce_written_with_the_authentication_waits_for_its_outcome_unread(build: Build) -> None:
    session = plain_handshake_done(build)
    request = big_produce(3)
    session.client_data(authenticate(2, b"\0alice\0alice-secret") + request[:65536], now=0.0)
    assert session.refusal is None, "the broker reads it after the authentication, with its usual limit"
    assert session.holding, "and reads nothing meanwhile: neither does the proxy"
    session.broker_data(answer(2), now=0.0)
    assert session.refusal is None and not session.holding
    session.client_data(request[65536:], now=0.0)
    assert correlation_ids(taken(session.to_broker), 8) == [2, 3]


def test_a_re_authentication_is_read_with_the_limit_again(build: Build) -> None:
    session = plain_handshake_done(build, authenticated=True)
    session.client_data(handshake(3, "PLAIN") + authenticate(4, b"\0alice\0" + b"x" * LIMIT), now=1.0)
    assert session.refusal_reason == SASL_RECEIVE_LIMIT


def test_the_first_request_that_is_not_authentication_lifts_the_limit(build: Build) -> None:
    """GSSAPI's outcome is opaque to the proxy, and a listener without SASL never authenticates: a SASL
    listener would have closed a connection asking anything else first, so past it the limit is gone."""
    session, _ = build.session_with()
    session.client_data(produce(1, {"t": b"r"}), now=0.0)
    session.client_data(big_produce(2), now=0.0)
    assert session.refusal is None and correlation_ids(taken(session.to_broker), 8) == [1, 2]


def test_without_sasl_on_the_brokers_listener_no_limit_applies_before_the_first_request(build: Build) -> None:
    session, _ = build.session_with('client_sasl = "none"\n')
    session.client_data(big_produce(1), now=0.0)
    assert session.refusal is None and correlation_ids(taken(session.to_broker), 8) == [1]


ILLEGAL_SASL_STATE = 34


def test_a_sasl_authenticate_after_authentication_is_the_brokers_to_refuse_and_what_follows_it_flows(
    build: Build,
) -> None:
    """The broker answers a SaslAuthenticate after authentication with ILLEGAL_SASL_STATE and goes on
    (KafkaApis.handleSaslAuthenticateRequest). The proxy reads nothing of it (a client sizes it: a
    90 MB token was decoded and parsed as JSON on the loop), keeps the user, and drops nothing after
    it (the requests that waited for its answer were dropped as if it had ended the connection)."""
    session, _ = build.session_with('client_sasl = "required"\n' + ALICE_QUOTA)
    session.client_data(handshake(1, "PLAIN") + authenticate(2, b"\0alice\0alice-secret"), now=0.0)
    session.broker_data(handshake_answer(1) + answer(2), now=0.0)
    taken(session.to_broker), taken(session.to_client)
    assert session.user == "alice" and session.receive_limit is None
    token = unsecured_jws({"sub": "bob", "pad": [[[[[]]]]] * 200_000})  # ~2.8 MB of JSON
    session.client_data(authenticate(3, oauth_first(token)) + produce(4, {"t": b"r"}), now=1.0)
    assert correlation_ids(taken(session.to_broker), 8) == [3, 4], "nothing waits for its answer"
    session.broker_data(answer(3, ILLEGAL_SASL_STATE) + produce_answer(4, ["t"]), now=1.0)
    assert correlation_ids(taken(session.to_client), 4) == [3, 4]
    assert session.user == "alice" and session.refusal is None


def test_a_token_nested_deeper_than_json_reads_claims_no_user(build: Build) -> None:
    token = unsecured_jws({"sub": "x"}).split(".")
    payload = base64.urlsafe_b64encode(b"[" * 100_000).rstrip(b"=").decode()
    assert jws_claim(".".join((token[0], payload, "")), "sub") is None
