"""The SASL exchange's requests and the broker's answers, as the session tests feed them."""

from __future__ import annotations

from struct import pack

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest


def handshake(correlation_id: int, mechanism: str) -> bytes:
    request = SaslHandshakeRequest(version=1, mechanism=mechanism)
    request.with_header(correlation_id=correlation_id, client_id="app")
    return bytes(request.encode(header=True, framed=True))


def authenticate(correlation_id: int, auth_bytes: bytes) -> bytes:
    request = SaslAuthenticateRequest(version=1, auth_bytes=auth_bytes)
    request.with_header(correlation_id=correlation_id, client_id="app")
    return bytes(request.encode(header=True, framed=True))


def answer(correlation_id: int, error_code: int = 0, auth_bytes: bytes = b"", api_version: int = 1) -> bytes:
    """A broker's SaslHandshake (v1) or SaslAuthenticate (v1) answer; both start with error_code."""
    if api_version == -1:  # SaslHandshake v1: error_code, mechanisms
        body = pack(">hi", error_code, 1) + pack(">h", 5) + b"PLAIN"
    else:
        message = None if error_code == 0 else "Authentication failed"
        body = bytes(
            SaslAuthenticateResponse(
                version=1, error_code=error_code, error_message=message, auth_bytes=auth_bytes, session_lifetime_ms=0
            ).encode()
        )
    payload = pack(">i", correlation_id) + body
    return pack(">i", len(payload)) + payload


def handshake_answer(correlation_id: int) -> bytes:
    return answer(correlation_id, api_version=-1)
