from struct import unpack_from

import pytest
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.headers import response_body_offset
from quotagate.protocol.produce import _walked_throttle_offset, produce_response_throttle_offset
from quotagate.protocol.produce_walk import usual_flexible_throttle_offset
from quotagate.protocol.rewrite import RESPONSE_REWRITERS
from quotagate.protocol.share import LAST_KNOWN_VERSION as SHARE_MAX_VERSION
from quotagate.protocol.version_caps import FETCH_MAX_VERSION, PRODUCE_MAX_VERSION, exceeds_advertised_cap
from tests.support.messages import produce_response
from tests.support.rewrite_messages import (
    BROKER_CONFIGS,
    PROXY_HOST,
    Recorder,
    api_versions_message,
    describe_configs_message,
    response_frame,
)


def rewrite(api_key: int, version: int, message, advertise=None):
    advertise = advertise or Recorder()
    out = RESPONSE_REWRITERS[api_key](response_frame(api_key, version, message), version, advertise)
    if out is None:
        return None
    view = memoryview(out)
    assert unpack_from(">i", view, 0)[0] == len(view) - 4
    assert unpack_from(">i", view, 4)[0] == 5, "correlation id must be kept"
    body = view[response_body_offset(view, api_key, version) :]
    return type(message).decode(body, version=version)


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_brokers_get_proxy_addresses_and_real_ones_are_recorded(version: int) -> None:
    broker = MetadataResponse.MetadataResponseBroker
    message = MetadataResponse(
        version=version,
        brokers=[broker(version=version, node_id=n, host=f"kafka-{n}", port=9092, rack=None) for n in (1, 2)],
        controller_id=1,
        topics=[],
    )
    recorder = Recorder()
    out = rewrite(ApiKey.METADATA, version, message, recorder)
    assert [(b.node_id, b.host, b.port) for b in out.brokers] == [(1, PROXY_HOST, 20001), (2, PROXY_HOST, 20002)]
    assert recorder.seen == {1: ("kafka-1", 9092), 2: ("kafka-2", 9092)}


@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_single_form_is_rewritten(version: int) -> None:
    message = FindCoordinatorResponse(version=version, error_code=0, node_id=3, host="kafka-3", port=9092)
    out = rewrite(ApiKey.FIND_COORDINATOR, version, message)
    assert (out.node_id, out.host, out.port) == (3, PROXY_HOST, 20003)


def test_find_coordinator_error_is_forwarded_untouched() -> None:
    message = FindCoordinatorResponse(version=2, error_code=15, node_id=-1, host="", port=-1)
    assert rewrite(ApiKey.FIND_COORDINATOR, 2, message) is None


@pytest.mark.parametrize("version", range(4, 7))
def test_find_coordinator_batched_form_rewrites_every_found_coordinator(version: int) -> None:
    coordinator = FindCoordinatorResponse.Coordinator
    message = FindCoordinatorResponse(
        version=version,
        coordinators=[
            coordinator(version=version, key="g1", node_id=2, host="kafka-2", port=9092, error_code=0),
            coordinator(version=version, key="g2", node_id=-1, host="", port=-1, error_code=15),
        ],
    )
    out = rewrite(ApiKey.FIND_COORDINATOR, version, message)
    assert [(c.key, c.host, c.port) for c in out.coordinators] == [("g1", PROXY_HOST, 20002), ("g2", "", -1)]


@pytest.mark.parametrize("version", range(0, 3))
def test_describe_cluster_brokers_are_rewritten(version: int) -> None:
    broker = DescribeClusterResponse.DescribeClusterBroker
    message = DescribeClusterResponse(
        version=version,
        cluster_id="c",
        controller_id=1,
        brokers=[broker(version=version, broker_id=1, host="kafka-1", port=9092, rack="r1")],
    )
    out = rewrite(ApiKey.DESCRIBE_CLUSTER, version, message)
    assert [(b.broker_id, b.host, b.port, b.rack) for b in out.brokers] == [(1, PROXY_HOST, 20001, "r1")]


def test_describe_cluster_controller_endpoints_are_never_shown() -> None:
    broker = DescribeClusterResponse.DescribeClusterBroker
    message = DescribeClusterResponse(
        version=1,
        endpoint_type=2,
        cluster_id="c",
        controller_id=1,
        brokers=[broker(version=1, broker_id=1, host="kafka-1", port=9093, rack=None)],
    )
    recorder = Recorder()
    assert rewrite(ApiKey.DESCRIBE_CLUSTER, 1, message, recorder).brokers == []
    assert recorder.seen == {}


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_caps_what_the_proxy_must_parse(version: int) -> None:
    out = rewrite(ApiKey.API_VERSIONS, version, api_versions_message(version))
    versions = {e.api_key: (e.min_version, e.max_version) for e in out.api_keys}
    assert versions == {
        0: (3, PRODUCE_MAX_VERSION),
        1: (4, FETCH_MAX_VERSION),
        3: (0, 13),
        55: (0, 1),
        12: (0, 4),
        78: (1, SHARE_MAX_VERSION),
        79: (1, 1),
    }


def test_api_versions_error_answer_other_than_unsupported_version_is_forwarded_untouched() -> None:
    message = ApiVersionsResponse(version=0, error_code=42, api_keys=[])
    assert rewrite(ApiKey.API_VERSIONS, 0, message) is None


@pytest.mark.parametrize("version", range(3, 14))
def test_produce_throttle_offset_is_found_behind_the_partition_results(version: int) -> None:
    frame = response_frame(ApiKey.PRODUCE, version, produce_response(version, throttle=12345))
    offset = produce_response_throttle_offset(frame, response_body_offset(frame, ApiKey.PRODUCE, version), version)
    assert unpack_from(">i", frame, offset)[0] == 12345


@pytest.mark.parametrize(
    ("version", "endpoints"), [(v, False) for v in range(9, 14)] + [(v, True) for v in range(10, 14)]
)  # KIP-951 NodeEndpoints exist from v10
@pytest.mark.parametrize(("topics", "partitions"), [(0, 0), (1, 1), (3, 1), (2, 3)])
def test_the_usual_produce_response_shortcut_agrees_with_the_full_walk_or_declines(
    version: int, topics: int, partitions: int, endpoints: bool
) -> None:
    # Partitions after the first carry record errors and a message: the shortcut must decline those.
    message = produce_response(version, throttle=777, endpoints=endpoints, topics=topics, partitions=partitions)
    frame = response_frame(ApiKey.PRODUCE, version, message)
    body = response_body_offset(frame, ApiKey.PRODUCE, version)
    offset = usual_flexible_throttle_offset(frame, body, version)
    if partitions <= 1:
        assert offset is not None and unpack_from(">i", frame, offset)[0] == 777
    for end in range(body, len(frame) + 1):  # truncated anywhere: declines, or agrees with the walk
        cut = frame[:end]
        shortcut = usual_flexible_throttle_offset(cut, body, version)
        if shortcut is not None:
            assert shortcut == _walked_throttle_offset(cut, body, version)


@pytest.mark.parametrize("version", range(3, 14))
def test_produce_response_without_node_endpoints_is_forwarded_untouched(version: int) -> None:
    assert rewrite(ApiKey.PRODUCE, version, produce_response(version, throttle=0)) is None


@pytest.mark.parametrize("version", range(10, 14))
def test_produce_node_endpoints_get_proxy_addresses(version: int) -> None:
    out = rewrite(ApiKey.PRODUCE, version, produce_response(version, throttle=7, endpoints=True))
    assert [(n.node_id, n.host, n.port) for n in out.node_endpoints] == [(2, PROXY_HOST, 20002)]
    assert out.throttle_time_ms == 7 and len(out.responses) == 2


@pytest.mark.parametrize("version", [4, 9, 12])
def test_metadata_topics_are_observed_with_their_partition_counts(version: int) -> None:
    topic_cls = MetadataResponse.MetadataResponseTopic
    partition_cls = topic_cls.MetadataResponsePartition
    message = MetadataResponse(
        version=version,
        brokers=[],
        controller_id=1,
        topics=[
            topic_cls(
                version=version,
                error_code=0,
                name=name,
                partitions=[partition_cls(version=version, partition_index=i) for i in range(count)],
            )
            for name, count in (("orders", 6), ("clicks", 2))
        ]
        + [topic_cls(version=version, error_code=3, name="missing", partitions=[])],
    )
    recorder = Recorder()
    rewrite(ApiKey.METADATA, version, message, recorder)
    assert [(name, count) for name, _, count in recorder.topics] == [("orders", 6), ("clicks", 2)]


HIDDEN = {"listeners", "advertised.listeners", "controller.quorum.bootstrap.servers", "controller.quorum.voters"}


@pytest.mark.parametrize("version", range(0, 5))
def test_describe_configs_hides_every_broker_address_as_the_broker_hides_secrets(version: int) -> None:
    out = rewrite(ApiKey.DESCRIBE_CONFIGS, version, describe_configs_message(version, BROKER_CONFIGS))
    seen = {c.name: (c.value, c.is_sensitive) for c in out.results[0].configs}
    assert seen == {
        name: (None, True) if name in HIDDEN | {"some.plugin.endpoint"} or sensitive else (value, False)
        for name, value, sensitive in BROKER_CONFIGS
    }
    if version >= 1:  # synonyms carry the same values: hidden with them
        assert all(s.value is None for c in out.results[0].configs if c.is_sensitive for s in c.synonyms)
        assert [s.value for c in out.results[0].configs if c.name == "log.dirs" for s in c.synonyms] == [
            "/var/lib/kafka"
        ]


def test_describe_configs_without_addresses_is_forwarded_untouched() -> None:
    message = describe_configs_message(4, [("retention.ms", "604800000", False), ("cleanup.policy", "delete", False)])
    assert rewrite(ApiKey.DESCRIBE_CONFIGS, 4, message) is None


def test_api_versions_unsupported_version_answer_is_capped_too() -> None:
    # The broker answers a version it does not speak with a v0 body listing what it speaks (KIP-511).
    message = api_versions_message(0)
    message.error_code = 35
    frame = response_frame(ApiKey.API_VERSIONS, 0, message)
    out = memoryview(RESPONSE_REWRITERS[ApiKey.API_VERSIONS](frame, 9, Recorder()))
    decoded = ApiVersionsResponse.decode(out[response_body_offset(out, ApiKey.API_VERSIONS, 9) :], version=0)
    assert decoded.error_code == 35
    assert {e.api_key: e.max_version for e in decoded.api_keys} == {
        0: PRODUCE_MAX_VERSION,
        1: FETCH_MAX_VERSION,
        3: 13,
        55: 1,
        12: 4,
        78: SHARE_MAX_VERSION,
        79: 1,
    }


@pytest.mark.parametrize(
    ("api_key", "version", "refused"),
    [
        (ApiKey.DESCRIBE_QUORUM, 1, False),
        (ApiKey.DESCRIBE_QUORUM, 2, True),
        (ApiKey.PRODUCE, PRODUCE_MAX_VERSION, False),
        (ApiKey.PRODUCE, PRODUCE_MAX_VERSION + 1, True),
        (ApiKey.FETCH, FETCH_MAX_VERSION, False),
        (ApiKey.FETCH, FETCH_MAX_VERSION + 1, True),
        (ApiKey.SHARE_FETCH, SHARE_MAX_VERSION, False),
        (ApiKey.SHARE_FETCH, SHARE_MAX_VERSION + 1, True),
        (ApiKey.SHARE_ACKNOWLEDGE, SHARE_MAX_VERSION, False),
        (ApiKey.SHARE_ACKNOWLEDGE, SHARE_MAX_VERSION + 1, True),
        (ApiKey.METADATA, 13, False),
        (ApiKey.METADATA, 14, True),
        (ApiKey.DESCRIBE_CONFIGS, 5, True),
        (ApiKey.API_VERSIONS, 99, False),  # the broker answers it UNSUPPORTED_VERSION; the proxy caps that answer
        (ApiKey.HEARTBEAT, 99, False),  # not capped by the proxy: the broker decides
    ],
)
def test_a_request_above_what_api_versions_offered_is_refused(api_key: int, version: int, refused: bool) -> None:
    assert exceeds_advertised_cap(api_key, version) is refused
