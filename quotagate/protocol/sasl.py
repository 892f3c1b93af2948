"""Reading who a client authenticates as, from the SASL exchange the proxy forwards to the broker.

The broker does the authentication; the proxy only reads the user name the client presents and
believes it once the broker's SaslAuthenticate answer says the exchange succeeded. Mechanisms:
PLAIN ([authzid] NUL authcid NUL password: the authorization id if given, else the authentication
id, as Kafka's PlainSaslServer does) and SCRAM-SHA-256/512 (the n= attribute of the client-first
message). Other mechanisms (GSSAPI, OAUTHBEARER) leave the connection's principal as it was.
"""

from __future__ import annotations

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from quotagate.protocol.framing import FrameError, frame_errors

PLAIN = "PLAIN"
SCRAM_MECHANISMS = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})


def _decode(cls: type, frame: memoryview, body_offset: int, version: int) -> object:
    try:
        return cls.decode(frame[body_offset:], version=version)
    except Exception as exc:  # kafka-python raises assorted errors on bad bytes
        raise FrameError(f"cannot decode {cls.__name__} v{version}: {exc}") from exc


@frame_errors("SaslHandshake request")
def handshake_mechanism(frame: memoryview, body_offset: int, version: int) -> str:
    return _decode(SaslHandshakeRequest, frame, body_offset, version).mechanism  # type: ignore[attr-defined]


@frame_errors("SaslAuthenticate request")
def authenticate_user(mechanism: str | None, frame: memoryview, body_offset: int, version: int) -> str | None:
    """The user a SaslAuthenticate request claims to be, or None if the mechanism does not say."""
    if mechanism != PLAIN and mechanism not in SCRAM_MECHANISMS:
        return None
    auth_bytes = bytes(_decode(SaslAuthenticateRequest, frame, body_offset, version).auth_bytes or b"")  # type: ignore[attr-defined]
    return user_from_auth_bytes(mechanism, auth_bytes)


def user_from_auth_bytes(mechanism: str, auth_bytes: bytes) -> str | None:
    text = auth_bytes.decode("utf-8", "replace")
    if mechanism == PLAIN:
        parts = text.split("\0")
        if len(parts) != 3:
            return None
        authzid, authcid, _password = parts
        return authzid or authcid or None
    # SCRAM client-first message: gs2-header "n,," (or "n,a=authzid,") then "n=user,r=nonce".
    if not text.startswith(("n,", "y,", "p=")):
        return None  # a later SCRAM message: nothing about the user
    for attribute in text.split(",")[2:]:
        if attribute.startswith("n="):
            return attribute[2:].replace("=2C", ",").replace("=3D", "=") or None
    return None
