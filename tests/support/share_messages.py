"""ShareFetch and ShareAcknowledge bodies: the golden bytes Kafka's own classes encode, and requests."""

from __future__ import annotations

from struct import pack

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.share import LAST_KNOWN_VERSION as SHARE_MAX_VERSION
from tests.support.messages import compact

GOLDEN: dict[tuple[int, int], bytes] = {
    (ApiKey.SHARE_FETCH, 1): bytes.fromhex(
        "0000000700000000007530020102030405060708090a0b0c0d0e0f100300000000000000000000000000010000000300"
        "4d000000000000000000000040ffffffff02943629b5000000000000ffffffffffffffffffffffffffffffffffffffff"
        "ffffffffffffffffffff000000011c000000066b65790a76616c75650002000000000000000000000000000000000001"
        "00000000000100060f6e6f7420746865206c6561646572000000000000020000000400010100000200000002116b6166"
        "6b612d322e696e7465726e616c00002384077261636b2d620000"
    ),
    (ApiKey.SHARE_FETCH, 2): bytes.fromhex(
        "0000000700000000007530020102030405060708090a0b0c0d0e0f100300000000000000000000000000010000000300"
        "4d000000000000000000000040ffffffff02943629b5000000000000ffffffffffffffffffffffffffffffffffffffff"
        "ffffffffffffffffffff000000011c000000066b65790a76616c75650002000000000000000000000000000000000001"
        "00000000000100060f6e6f7420746865206c6561646572000000000000020000000400010100000200000002116b6166"
        "6b612d322e696e7465726e616c00002384077261636b2d620000"
    ),
    (ApiKey.SHARE_ACKNOWLEDGE, 1): bytes.fromhex(
        "00000007000000020102030405060708090a0b0c0d0e0f10020000000100060000000002000000040000000200000002"
        "116b61666b612d322e696e7465726e616c00002384000000"
    ),
    (ApiKey.SHARE_ACKNOWLEDGE, 2): bytes.fromhex(
        "0000000700000000007530020102030405060708090a0b0c0d0e0f100200000001000600000000020000000400000002"
        "00000002116b61666b612d322e696e7465726e616c00002384000000"
    ),
}


def response_frame(api_key: int, body: bytes) -> memoryview:
    header = pack(">i", CORRELATION_ID) + b"\x00"  # every share response has a flexible header
    return memoryview(pack(">i", len(header) + len(body)) + header + body)


def share_fetch_request(correlation_id: int, max_wait_ms: int, version: int = SHARE_MAX_VERSION) -> bytes:
    """A ShareFetch request header v2 and the body's head (group, member, epoch, max wait, min and
    max bytes, max records, batch size, v2's acquire mode and renew flag), no topics."""
    header = pack(">hhih", ApiKey.SHARE_FETCH, version, correlation_id, 3) + b"app" + b"\x00"
    body = compact("group") + compact("member-1") + pack(">iiiiii", 0, max_wait_ms, 1, 65536, 500, 500)
    body += (b"\x00\x00" if version >= 2 else b"") + b"\x01\x01\x00"  # no topics, no forgotten, no tags
    return pack(">i", len(header) + len(body)) + header + body


CORRELATION_ID = 5
