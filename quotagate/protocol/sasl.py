"""Reading who a client authenticates as, from the SASL exchange the proxy forwards to the broker.

The broker does the authentication; the proxy only reads the user name the client claims in its
first message and believes it once the broker's answer says the exchange is over and succeeded.
Mechanisms:
- PLAIN ([authzid] NUL authcid NUL password): the authorization id if given, else the
  authentication id, as Kafka's PlainSaslServer does; one round, over at its first success.
- SCRAM-SHA-256/512: the n= attribute of the client-first message; over when the broker sends its
  server-final message (v=...), the answer to the client's proof.
- OAUTHBEARER (RFC 7628): a claim of the bearer token's JWS payload (`sub` by default, as Kafka's
  sasl.oauthbearer.sub.claim.name); over at a success with an empty answer (a rejected token is
  answered with a JSON error challenge first, error_code 0, and refused on the next round).
Other mechanisms (GSSAPI) never change the connection's principal: the proxy cannot know the
Kerberos principal's short name as the broker maps it.
"""

from __future__ import annotations

import base64
import binascii
import json

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.framing import decoded, frame_errors

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
SCRAM_MECHANISMS = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})
DEFAULT_PRINCIPAL_CLAIM = "sub"
# The highest versions the classes used here read (version_caps.py): handshake requests, and
# authenticate requests and responses.
READABLE_UP_TO: dict[int, int] = {
    ApiKey.SASL_HANDSHAKE: SaslHandshakeRequest.max_version,
    ApiKey.SASL_AUTHENTICATE: min(SaslAuthenticateRequest.max_version, SaslAuthenticateResponse.max_version),
}


@frame_errors("SaslHandshake request")
def handshake_mechanism(frame: memoryview, body_offset: int, version: int) -> str:
    return decoded(SaslHandshakeRequest, frame, body_offset, version).mechanism  # type: ignore[attr-defined]


@frame_errors("SaslAuthenticate request")
def authenticate_user(
    mechanism: str | None,
    frame: memoryview,
    body_offset: int,
    version: int,
    principal_claim: str = DEFAULT_PRINCIPAL_CLAIM,
) -> str | None:
    """The user a SaslAuthenticate request claims to be, or None if it does not say (a later round,
    or a mechanism the proxy cannot read)."""
    if not end_readable(mechanism):
        return None
    auth_bytes = bytes(decoded(SaslAuthenticateRequest, frame, body_offset, version).auth_bytes or b"")  # type: ignore[attr-defined]
    return user_from_auth_bytes(mechanism, auth_bytes, principal_claim)


def authentication_outcome(mechanism: str | None, frame: memoryview, body_offset: int, version: int) -> bool | None:
    """What a SaslAuthenticate response says: False (refused), True (the exchange is over and
    succeeded) or None (succeeded so far, more rounds to come)."""
    response = decoded(SaslAuthenticateResponse, frame, body_offset, version)
    if response.error_code != 0:  # type: ignore[attr-defined]
        return False
    return True if exchange_complete(mechanism, bytes(response.auth_bytes or b"")) else None  # type: ignore[attr-defined]


def end_readable(mechanism: str | None) -> bool:
    """Whether the proxy can tell from the broker's answers when an exchange of `mechanism` ends
    (PLAIN, SCRAM, OAUTHBEARER); GSSAPI's is opaque to it."""
    return mechanism == PLAIN or mechanism == OAUTHBEARER or mechanism in SCRAM_MECHANISMS


def exchange_complete(mechanism: str | None, server_auth_bytes: bytes) -> bool:
    """Whether a successful SaslAuthenticate answer carrying `server_auth_bytes` ends the exchange."""
    if mechanism == PLAIN:
        return True
    if mechanism in SCRAM_MECHANISMS:
        return server_auth_bytes.startswith(b"v=")  # server-final: the proof was accepted
    if mechanism == OAUTHBEARER:
        return not server_auth_bytes  # an error challenge is a JSON document
    return False


def user_from_auth_bytes(
    mechanism: str, auth_bytes: bytes, principal_claim: str = DEFAULT_PRINCIPAL_CLAIM
) -> str | None:
    text = auth_bytes.decode("utf-8", "replace")
    if mechanism == PLAIN:
        parts = text.split("\0")
        if len(parts) != 3:
            return None
        authzid, authcid, _password = parts
        return authzid or authcid or None
    if mechanism == OAUTHBEARER:
        return oauthbearer_user(text, principal_claim)
    # SCRAM client-first message: gs2-header "n,," (or "n,a=authzid,") then "n=user,r=nonce".
    if not text.startswith(("n,", "y,", "p=")):
        return None  # a later SCRAM message: nothing about the user
    for attribute in text.split(",")[2:]:
        if attribute.startswith("n="):
            return attribute[2:].replace("=2C", ",").replace("=3D", "=") or None
    return None


def oauthbearer_user(client_first: str, principal_claim: str) -> str | None:
    """The principal claim of the token in an OAUTHBEARER initial response (RFC 7628 §3.1:
    gs2-header ^A auth=Bearer <token> ^A ... ^A^A), or None if it holds no readable token."""
    if not client_first.startswith(("n,", "y,")):
        return None  # the client's ^A after an error challenge, or not OAUTHBEARER at all
    for pair in client_first.split("\x01")[1:]:
        key, _, value = pair.partition("=")
        if key == "auth" and value.lower().startswith("bearer "):
            return jws_claim(value[7:].strip(), principal_claim)
    return None


def jws_claim(token: str, claim: str) -> str | None:
    """A string claim of a compact JWS's payload, read without checking the signature: the broker
    validates the token, and the proxy believes the claim only once the broker accepted it."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError, RecursionError):  # a token nested deeper than json reads
        return None
    value = payload.get(claim) if isinstance(payload, dict) else None
    return value if isinstance(value, str) and value else None
