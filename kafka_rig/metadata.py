"""The rig's readiness probe: which brokers a node lists in Metadata, and the active controller.

The request and the answer are kafka-python's Metadata classes (the protocol module the project
already depends on), not a codec of our own; only the framing on the socket is here."""

from __future__ import annotations

import socket
import struct

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from kafka_rig.processes import HOST

# v4: the oldest version Kafka 4 still answers (it dropped v0-v3), and not yet flexible, so the
# response header is the correlation id alone.
METADATA_VERSION = 4
CORRELATION_ID = 1


def metadata_request() -> bytes:
    """A framed Metadata request for no topics: the brokers and the controller only."""
    request = MetadataRequest(version=METADATA_VERSION, topics=[], allow_auto_topic_creation=False)
    request.with_header(correlation_id=CORRELATION_ID, client_id="kafka-rig")
    return bytes(request.encode(header=True, framed=True))


def brokers_and_controller(response: bytes) -> tuple[list[int], int]:
    """(sorted broker ids, controller id) of a Metadata response, without its size prefix."""
    (correlation_id,) = struct.unpack_from(">i", response)
    if correlation_id != CORRELATION_ID:
        raise ConnectionError(f"Metadata answer for correlation id {correlation_id}, not {CORRELATION_ID}")
    decoded = MetadataResponse.decode(memoryview(response)[4:], version=METADATA_VERSION)
    return sorted(broker.node_id for broker in decoded.brokers), decoded.controller_id


def metadata_brokers(port: int, timeout: float = 3.0) -> tuple[list[int], int]:
    """Ask one node for cluster metadata; return (sorted broker ids, controller id).

    Fenced brokers are not listed, so "all N ids present" means the cluster is usable."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(metadata_request())
        size = struct.unpack(">i", _recv_exact(sock, 4))[0]
        return brokers_and_controller(_recv_exact(sock, size))


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        chunks += chunk
    return bytes(chunks)
