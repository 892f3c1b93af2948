"""Responses the rewriters work on, built with kafka-python's classes, and a recorder of what a rewrite
teaches the proxy."""

from __future__ import annotations

from struct import pack

from kafka.protocol.admin import DescribeConfigsResponse
from kafka.protocol.metadata import ApiVersionsResponse

from quotagate.protocol.apis import response_header_is_flexible

PROXY_HOST = "proxy.example"


class Recorder:
    """A ClusterView that records real addresses and topics, and maps node N to port 20000 + N."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[str, int]] = {}
        self.topics: list[tuple[str, object, int]] = []

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        self.seen[node_id] = (host, port)
        return PROXY_HOST, 20000 + node_id

    def observe_topics(self, topics) -> None:
        self.topics.extend(topics)


def response_frame(api_key: int, version: int, message) -> memoryview:
    header = pack(">i", 5) + (b"\x00" if response_header_is_flexible(api_key, version) else b"")
    body = bytes(message.encode(version=version))
    return memoryview(pack(">i", len(header) + len(body)) + header + body)


def api_versions_message(version: int) -> ApiVersionsResponse:
    entry = ApiVersionsResponse.ApiVersion
    # ShareFetch as a broker newer than the proxy would offer it (v3, whose layout is unknown here).
    keys = [(0, 3, 13), (1, 4, 18), (3, 0, 13), (55, 0, 2), (12, 0, 4), (78, 1, 3), (79, 1, 1)]
    return ApiVersionsResponse(
        version=version,
        error_code=0,
        api_keys=[entry(version=version, api_key=k, min_version=lo, max_version=hi) for k, lo, hi in keys],
    )


def describe_configs_message(version: int, configs: list[tuple[str, str | None, bool]]):
    result_cls = DescribeConfigsResponse.DescribeConfigsResult
    config_cls = result_cls.DescribeConfigsResourceResult
    synonym_cls = config_cls.DescribeConfigsSynonym
    entries = []
    for name, value, sensitive in configs:
        extra = (
            {"config_source": 4, "synonyms": [synonym_cls(version=version, name=name, value=value, source=4)]}
            if version >= 1
            else {"is_default": False}
        )
        entries.append(
            config_cls(version=version, name=name, value=value, read_only=True, is_sensitive=sensitive, **extra)
        )
    result = result_cls(
        version=version, error_code=0, error_message=None, resource_type=4, resource_name="1", configs=entries
    )
    return DescribeConfigsResponse(version=version, throttle_time_ms=0, results=[result])


BROKER_CONFIGS = [
    ("listeners", "PLAINTEXT://:29092,CONTROLLER://:29392", False),
    ("advertised.listeners", "PLAINTEXT://127.0.0.1:29092", False),
    ("controller.quorum.bootstrap.servers", "127.0.0.1:29392", False),
    ("controller.quorum.voters", "1@127.0.0.1:29392", False),
    ("some.plugin.endpoint", "https://kafka-1.internal:8443/path", False),
    ("log.dirs", "/var/lib/kafka", False),
    ("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", False),
    ("inter.broker.protocol.version", "3.9-IV0", False),
    ("ssl.keystore.password", None, True),
]
