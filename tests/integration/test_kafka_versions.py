"""What a client negotiates through the proxy, against each Kafka version (issue 37, items 0 and 4).

Through the proxy a client gets, per API, the broker's versions within the proxy's caps
(quotagate/protocol/version_caps.py): the same as direct, except where the proxy caps. An ApiVersions
request newer than the proxy reads gets the answer a broker gives to one newer than it speaks
(KIP-511), and the client asks again lower. franz-go's own suite, whose clients ask ApiVersions v5,
runs through the proxy. `make test-matrix` runs this file against every Kafka version; `make test`
against the default, 3.9 (ZooKeeper mode) and 4.4.
"""

from __future__ import annotations

import re
from struct import pack, unpack_from

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.version_caps import MAX_VERSIONS, UNSUPPORTED_VERSION
from tests.support.franz_go import SMOKE, SUITE, run_suite
from tests.support.kafka_fixtures import KAFKA_VARIANT
from tests.support.kafka_helpers import round_trip

pytestmark = pytest.mark.matrix


def api_versions_request(version: int, correlation_id: int = 7) -> bytes:
    if version <= ApiVersionsRequest.max_version:
        request = ApiVersionsRequest(version=version, client_software_name="qg-test", client_software_version="1")
        request.with_header(correlation_id=correlation_id, client_id="versions")
        return bytes(request.encode(header=True, framed=True))
    # Newer than kafka-python knows: header v2 and v5's body (Kafka 4.4: the client software name and
    # version, cluster_id null, node_id -1, tags). A broker reads a version it does not know as v0.
    payload = pack(">hhih", ApiKey.API_VERSIONS, version, correlation_id, 8) + b"versions\x00"
    payload += b"\x08qg-test\x021" + b"\x00" + pack(">i", -1) + b"\x00"
    return pack(">i", len(payload)) + payload


def offered(port: int) -> dict[int, tuple[int, int]]:
    """The (min, max) version of each API that an ApiVersions v3 answer from `port` offers."""
    answer = round_trip(port, api_versions_request(3))
    decoded = ApiVersionsResponse.decode(memoryview(answer)[4:], version=3)  # header v0: the correlation id
    assert decoded.error_code == 0
    return {entry.api_key: (entry.min_version, entry.max_version) for entry in decoded.api_keys}


def within_caps(direct: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """What the proxy should offer in front of a broker that offers `direct`: the intersection."""
    expected = {}
    for key, (low, high) in direct.items():
        cap = MAX_VERSIONS.get(key, high)
        if cap >= low:
            expected[key] = (low, min(high, cap))
    return expected


@pytest.mark.version_slice
def test_the_proxy_offers_the_brokers_versions_within_its_caps_and_nothing_else(proxy, kafka) -> None:
    direct = offered(kafka.nodes[0].port)
    through = offered(proxy.port)
    assert through == within_caps(direct)
    lowered = {key: (direct[key][1], through[key][1]) for key in through if through[key] != direct[key]}
    dropped = sorted(set(direct) - set(through))
    print(f"Kafka {KAFKA_VARIANT}: capped (broker max, proxy max) {lowered}; dropped {dropped}")


_USABLE = re.compile(r"^\s*(\w+)\((\d+)\): (?:(\d+) to (\d+)|UNSUPPORTED)(?: \[usable: (\d+)\])?", re.MULTILINE)


def negotiated(kafka_tool, bootstrap: str) -> dict[int, int | None]:
    """What Kafka's own clients would use per API against `bootstrap` (kafka-broker-api-versions.sh:
    the newest version both the client and the broker know, None where they share none)."""
    out = kafka_tool("broker-api-versions", "--bootstrap-server", bootstrap).stdout
    usable = {int(key): (int(use) if use else None) for _name, key, _low, _high, use in _USABLE.findall(out)}
    assert usable, out
    return usable


@pytest.mark.java
def test_kafkas_own_clients_negotiate_through_the_proxy_what_they_negotiate_direct_less_the_caps(
    proxy, kafka, kafka_tool
) -> None:
    direct = negotiated(kafka_tool, kafka.bootstrap)
    through = negotiated(kafka_tool, proxy.bootstrap)
    broker = offered(kafka.nodes[0].port)
    for key, version in direct.items():
        cap = MAX_VERSIONS.get(key)
        if cap is None or version is None:
            assert through.get(key) == version, (key, version, through.get(key))
        elif cap < broker[key][0]:
            assert through.get(key) is None, (key, "the proxy reads no version this broker speaks")
        else:
            assert through.get(key) == min(version, cap), (key, version, cap, through.get(key))


@pytest.mark.version_slice
@pytest.mark.parametrize("version", [ApiVersionsRequest.max_version + 1, 127])
def test_api_versions_newer_than_the_proxy_reads_is_answered_as_the_broker_answers_one_newer_than_it_speaks(
    proxy, kafka, version: int
) -> None:
    answer = round_trip(proxy.port, api_versions_request(version, correlation_id=41))
    assert unpack_from(">i", answer)[0] == 41
    decoded = ApiVersionsResponse.decode(memoryview(answer)[4:], version=0)
    assert decoded.error_code == UNSUPPORTED_VERSION
    range_ = [(entry.api_key, entry.min_version, entry.max_version) for entry in decoded.api_keys]
    assert range_ == [(ApiKey.API_VERSIONS, 0, MAX_VERSIONS[ApiKey.API_VERSIONS])]
    broker_max = offered(kafka.nodes[0].port)[ApiKey.API_VERSIONS][1]
    if version > broker_max:  # the broker answers it the same way, with its own range
        direct = round_trip(kafka.nodes[0].port, api_versions_request(version, correlation_id=41))
        if broker_max == MAX_VERSIONS[ApiKey.API_VERSIONS]:
            assert answer == direct, "the very bytes the broker answers"
        else:
            assert ApiVersionsResponse.decode(memoryview(direct)[4:], version=0).error_code == UNSUPPORTED_VERSION
    # The client's next step: the version the answer names, answered by the broker through the proxy.
    again = ApiVersionsResponse.decode(memoryview(round_trip(proxy.port, api_versions_request(range_[0][2])))[4:], 4)
    assert again.error_code == 0 and again.api_keys


@pytest.mark.version_slice
def test_franz_gos_own_suite_starts_through_the_proxy(proxy) -> None:
    """Its clients ask ApiVersions v5 first (issue 37: Kafka 4.4 cut them off at their first request)."""
    run = run_suite(proxy.bootstrap, SMOKE, timeout=300)
    assert run.returncode == 0 and not run.failed, run.output[-4000:]
    assert set(run.results) == set(SMOKE)


@pytest.mark.matrix_only
def test_franz_gos_own_suite_passes_through_the_proxy(proxy) -> None:
    run = run_suite(proxy.bootstrap, SUITE)
    assert run.returncode == 0 and not run.failed, (run.failed, run.output[-6000:])
    print(f"Kafka {KAFKA_VARIANT}: franz-go {run.results}")
