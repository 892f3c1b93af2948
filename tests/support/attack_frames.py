"""Frames an attacker sends to make a Kafka peer work before it can refuse them (issue 34), built
by hand, byte for byte (kafka-python would take seconds to encode 200 000 entries), and a sender.

Each builder returns the whole frame (size prefix included); `send_and_wait` writes one and waits
until the peer answers, closes or `timeout` passes, which is what the attack callable of
tests/support/canary.py does.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

from tests.support.messages import compact, uvarint

PRODUCE = 0
METADATA = 3
ALTER_CLIENT_QUOTAS = 49
DESCRIBE_CLIENT_QUOTAS = 48
CLIENT_ID = b"attacker"


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header_v1(api_key: int, version: int, correlation_id: int) -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(CLIENT_ID)) + CLIENT_ID


def produce_with_tagged_header(size: int, version: int = 13, correlation_id: int = 7) -> bytes:
    """A Produce whose flexible request header (v2) is nothing but empty tagged fields, two bytes
    each (tag 0, size 0), to make the frame `size` bytes; no body."""
    fixed = header_v1(PRODUCE, version, correlation_id)
    count = (size - 4 - len(fixed) - 5) // 2
    tags = uvarint(count) + b"\x00\x00" * count
    return framed(fixed + tags)


def alter_client_quotas(entries: int, validate_only: bool = True, correlation_id: int = 9) -> bytes:
    """AlterClientQuotas v1 (flexible) setting producer_byte_rate for `entries` made-up users
    (~45 bytes each: 200 000 entries are ~9 MB). validate_only by default: a broker that lets the
    sender alter checks them and changes nothing."""
    key = compact("producer_byte_rate")
    op = b"\x02" + key + struct.pack(">d", 1_000_000.0) + b"\x00" + b"\x00"  # one op; remove false; tags
    user = compact("user")
    body = b"".join(b"\x02" + user + compact(f"tenant-{i:08d}") + b"\x00" + op + b"\x00" for i in range(entries))
    payload = (
        header_v1(ALTER_CLIENT_QUOTAS, 1, correlation_id)
        + b"\x00"  # header tagged fields
        + uvarint(entries + 1)
        + body
        + (b"\x01" if validate_only else b"\x00")
        + b"\x00"
    )
    return framed(payload)


def metadata_naming(topics: int, correlation_id: int = 11) -> bytes:
    """Metadata v4 naming `topics` topics that do not exist, allow_auto_topic_creation false."""
    names = b"".join(struct.pack(">h", 14) + f"ghost-{i:08d}".encode() for i in range(topics))
    payload = header_v1(METADATA, 4, correlation_id) + struct.pack(">i", topics) + names + b"\x00"
    return framed(payload)


FIND_COORDINATOR = 10
DESCRIBE_CONFIGS = 32
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


def find_coordinators(keys: int, correlation_id: int = 13) -> bytes:
    """FindCoordinator v4 (batched, flexible) asking for the coordinators of `keys` made-up groups."""
    names = b"".join(compact(f"group-{i:08d}") for i in range(keys))
    body = b"\x00" + uvarint(keys + 1) + names + b"\x00"  # key_type GROUP, the keys, tags
    return framed(header_v1(FIND_COORDINATOR, 4, correlation_id) + b"\x00" + body)


def describe_configs(resources: list[tuple[int, str]], correlation_id: int = 15) -> bytes:
    """DescribeConfigs v4 (flexible) of `resources` ((type, name) each: topics need not exist), every
    config of each, with synonyms."""
    entries = b"".join(bytes([kind]) + compact(name) + b"\x00" + b"\x00" for kind, name in resources)
    body = uvarint(len(resources) + 1) + entries + b"\x01\x00" + b"\x00"  # synonyms, no documentation
    return framed(header_v1(DESCRIBE_CONFIGS, 4, correlation_id) + b"\x00" + body)


def send_and_wait(address: tuple[str, int], frame: bytes, timeout: float = 30.0) -> str:
    """Writes `frame` on a new connection and reads until the peer answers one frame or closes:
    "answered", "closed" or "timeout"."""
    deadline = time.monotonic() + timeout
    with socket.create_connection(address, timeout=timeout) as sock:
        try:
            sock.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            return "closed"
        received = bytearray()  # appended in place: the canary shares this process's GIL
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(1 << 20)
            except ConnectionResetError:
                return "closed"
            except TimeoutError:
                break
            if not chunk:
                return "closed"
            received += chunk
            if len(received) >= 4 and len(received) >= 4 + struct.unpack_from(">i", received)[0]:
                return "answered"
    return "timeout"


def closed_without_answer(
    address: tuple[str, int], data: bytes, login: Callable[[socket.socket], None] | None = None
) -> bool:
    """Sends `data` on a new connection (after `login`, if given): True if the peer closes it without
    sending a byte."""
    with socket.create_connection(address, timeout=20) as sock:
        if login is not None:
            login(sock)
        sock.sendall(data)
        try:
            return sock.recv(65536) == b""
        except ConnectionResetError:
            return True


def answered_then_closed(address: tuple[str, int], data: bytes, timeout: float = 10.0) -> list[int]:
    """Writes `data` on a new connection and reads until the peer closes it: the correlation ids it
    answered, in order. A peer that never closes fails the test (socket timeout)."""
    return [int.from_bytes(frame[4:8], "big", signed=True) for frame in frames_until_closed(address, data, timeout)]


def frames_until_closed(
    address: tuple[str, int],
    data: bytes,
    timeout: float = 10.0,
    login: Callable[[socket.socket], None] | None = None,
) -> list[bytes]:
    """Writes `data` on a new connection (after `login`, if given) and reads until the peer closes it:
    the frames it answered, whole, in order. A peer that never closes fails the test (socket timeout)."""
    with socket.create_connection(address, timeout=timeout) as sock:
        if login is not None:
            login(sock)
        sock.sendall(data)
        received = bytearray()
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    frames, pos = [], 0
    while pos + 4 <= len(received):
        end = pos + 4 + int.from_bytes(received[pos : pos + 4], "big")
        frames.append(bytes(received[pos:end]))
        pos = end
    return frames
