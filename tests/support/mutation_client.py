"""Controller mutation requests sent on a raw socket, the throttle they come back with, and the clean-up
of what they created."""

from __future__ import annotations

import itertools
import socket
import time
from struct import pack, unpack

from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)

from quotagate.protocol.headers import response_body_offset

THROTTLED = 89
LAST_CALL_MS = [0.0]


def assert_throttle(actual: int, expected: int) -> None:
    """throttle_time_ms is the time until the bucket is out of debt, as of the response: the time
    the broker spent on the request (measured around the last call) has already been paid off."""
    elapsed = LAST_CALL_MS[0]
    assert expected - elapsed - 150 <= actual <= expected + 50, f"{actual} ms, expected {expected} - {elapsed:.0f}"


def call(port: int, request, client_id: str):
    """Sends one request on a new connection to the proxy and returns the decoded response."""
    correlation_id = next(_correlation)
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        started = time.monotonic()
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = unpack(">i", _read(sock, 4))[0]
        frame = memoryview(pack(">i", size) + _read(sock, size))
        LAST_CALL_MS[0] = (time.monotonic() - started) * 1000
    response_cls = {
        19: CreateTopicsResponse,
        20: DeleteTopicsResponse,
        37: CreatePartitionsResponse,
    }[request.API_KEY]
    version = request.API_VERSION
    return response_cls.decode(frame[response_body_offset(frame, request.API_KEY, version) :], version=version)


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the proxy closed the connection"
        data += chunk
    return data


def create(version: int, names: list[str], partitions: int, validate_only: bool = False) -> CreateTopicsRequest:
    topic = CreateTopicsRequest.CreatableTopic
    return CreateTopicsRequest(
        version=version,
        topics=[
            topic(version=version, name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])
            for n in names
        ],
        timeout_ms=30000,
        validate_only=validate_only,
    )


def cleanup(kafka, names: list[str]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)  # direct: no quota
    try:
        admin.delete_topics(names)
    except Exception:
        pass
    finally:
        admin.close()


_correlation = itertools.count(1)
