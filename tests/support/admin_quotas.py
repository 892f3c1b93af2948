"""A proxy whose quotas are set through Kafka's Admin API (kafka-configs.sh, the Java Admin client), in
front of the session broker's SASL listener, and its /quotas view; raw DescribeClientQuotas and
AlterClientQuotas requests, and their answers as plain values (the same bytes to a broker and to the
proxy, answers compared field by field)."""

from __future__ import annotations

import json
import socket
import struct
import urllib.request
from pathlib import Path

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from quotagate.protocol.headers import response_body_offset
from tests.support.kafka_fixtures import KAFKA_SASL_BOOTSTRAP
from tests.support.proxy_fixtures import ProxyProcess


def admin_proxy(proxy_factory, tmp_path: Path) -> ProxyProcess:  # type: ignore[no-untyped-def]
    """User:admin may alter quotas; they are kept in a state file under tmp_path."""
    state = tmp_path / "admin-quotas.json"
    return proxy_factory(
        KAFKA_SASL_BOOTSTRAP,
        f'quota_window_num = 1\n\n[admin]\nalter_principals = ["User:admin"]\nstate_file = "{state}"\n',
    )


def quotas_view(metrics_port: int) -> dict:
    """The proxy's GET /quotas: configured entries, entities and their buckets."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/quotas", timeout=10) as response:
        return json.loads(response.read())


def alter_request(
    entries: list[tuple[list[tuple[str, str | None]], list[tuple[str, float, bool]]]],
    *,
    validate_only: bool = False,
    version: int = 1,
) -> bytes:
    cls = AlterClientQuotasRequest
    request = cls(
        version=version,
        entries=[
            cls.EntryData(
                version=version,
                entity=[cls.EntryData.EntityData(version=version, entity_type=t, entity_name=n) for t, n in entity],
                ops=[cls.EntryData.OpData(version=version, key=k, value=v, remove=r) for k, v, r in ops],
            )
            for entity, ops in entries
        ],
        validate_only=validate_only,
    )
    request.with_header(correlation_id=7, client_id="kafka-configs")
    return bytes(request.encode(header=True, framed=True))


def describe_request(components: list[tuple[str, int, str | None]], strict: bool = False, version: int = 1) -> bytes:
    cls = DescribeClientQuotasRequest
    request = cls(
        version=version,
        components=[cls.ComponentData(version=version, entity_type=t, match_type=m, match=n) for t, m, n in components],
        strict=strict,
    )
    request.with_header(correlation_id=8, client_id="kafka-configs")
    return bytes(request.encode(header=True, framed=True))


ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS = 49, 48


def ask(bootstrap: str, request: bytes, timeout: float = 15.0) -> bytes:
    """One request on a connection of its own; the response frame, size prefix included."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as connection:
        connection.sendall(request)
        head = _read(connection, 4)
        return head + _read(connection, struct.unpack(">i", head)[0])


def _read(connection: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(data)} of {count} bytes")
        data += chunk
    return data


def altered(frame: bytes, version: int) -> tuple:
    """An AlterClientQuotas response as plain values: (throttle_time_ms, [(error_code, error_message,
    [(entity_type, entity_name), ...]), ...])."""
    view = memoryview(frame)
    response = AlterClientQuotasResponse.decode(
        view[response_body_offset(view, ALTER_CLIENT_QUOTAS, version) :], version=version
    )
    entries = [
        (e.error_code, e.error_message, [(c.entity_type, c.entity_name) for c in e.entity]) for e in response.entries
    ]
    return response.throttle_time_ms, entries


def described_quotas(frame: bytes, version: int) -> tuple:
    """A DescribeClientQuotas response as plain values: (throttle_time_ms, error_code, error_message,
    [([(entity_type, entity_name), ...], [(key, value), ...]), ...] or None)."""
    view = memoryview(frame)
    response = DescribeClientQuotasResponse.decode(
        view[response_body_offset(view, DESCRIBE_CLIENT_QUOTAS, version) :], version=version
    )
    entries = None
    if response.entries is not None:
        entries = [
            ([(c.entity_type, c.entity_name) for c in e.entity], [(v.key, v.value) for v in e.values])
            for e in response.entries
        ]
    return response.throttle_time_ms, response.error_code, response.error_message, entries
