"""The proxy's version caps come from what its readers read, never from a list (issue 37 item 0)."""

from __future__ import annotations

import pytest
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest

from quotagate.protocol import share
from quotagate.protocol.apis import RESPONSE_CLASSES, ApiKey
from quotagate.protocol.rewrite import RESPONSE_REWRITERS
from quotagate.protocol.version_caps import (
    DELIBERATE_CAPS,
    MAX_VERSIONS,
    READERS,
    REWRITTEN_RESPONSES,
    cap_api_versions,
    exceeds_advertised_cap,
)


def test_an_api_is_capped_at_the_lowest_version_any_of_its_readers_reads() -> None:
    for key in {key for reader in (*READERS, DELIBERATE_CAPS) for key in reader}:
        limits = [reader[key] for reader in (*READERS, DELIBERATE_CAPS) if key in reader]
        assert MAX_VERSIONS[key] == min(limits), key
    assert set(MAX_VERSIONS) == {key for reader in (*READERS, DELIBERATE_CAPS) for key in reader}


@pytest.mark.parametrize(
    ("api_key", "classes"),
    [
        (ApiKey.CREATE_TOPICS, (CreateTopicsRequest, CreateTopicsResponse)),
        (ApiKey.DELETE_TOPICS, (DeleteTopicsRequest, DeleteTopicsResponse)),
        (ApiKey.CREATE_PARTITIONS, (CreatePartitionsRequest, CreatePartitionsResponse)),
        (ApiKey.SASL_HANDSHAKE, (SaslHandshakeRequest,)),
        (ApiKey.SASL_AUTHENTICATE, (SaslAuthenticateRequest, SaslAuthenticateResponse)),
        (ApiKey.API_VERSIONS, (ApiVersionsResponse,)),
        (ApiKey.METADATA, (RESPONSE_CLASSES[ApiKey.METADATA],)),
    ],
)
def test_a_message_decoded_with_kafka_pythons_classes_is_capped_at_their_newest_version(
    api_key: int, classes: tuple[type, ...]
) -> None:
    assert MAX_VERSIONS[api_key] == min(cls.max_version for cls in classes)


def test_share_responses_are_capped_at_the_layouts_the_walk_knows() -> None:
    assert MAX_VERSIONS[ApiKey.SHARE_FETCH] == MAX_VERSIONS[ApiKey.SHARE_ACKNOWLEDGE] == share.LAST_KNOWN_VERSION


def test_every_response_the_proxy_rewrites_is_capped() -> None:
    assert set(REWRITTEN_RESPONSES) <= set(RESPONSE_REWRITERS)
    assert set(RESPONSE_REWRITERS) <= set(MAX_VERSIONS)


def test_api_versions_above_its_cap_is_answered_not_refused_and_the_rest_are_refused() -> None:
    assert not exceeds_advertised_cap(ApiKey.API_VERSIONS, MAX_VERSIONS[ApiKey.API_VERSIONS] + 1)
    assert exceeds_advertised_cap(ApiKey.CREATE_TOPICS, MAX_VERSIONS[ApiKey.CREATE_TOPICS] + 1)
    assert not exceeds_advertised_cap(ApiKey.HEARTBEAT, 99)  # not read by the proxy: the broker decides


def test_the_brokers_ranges_are_cut_to_the_caps_and_an_api_with_none_in_common_is_left_out() -> None:
    entry = ApiVersionsResponse.ApiVersion
    offered = [
        entry(version=3, api_key=ApiKey.API_VERSIONS, min_version=0, max_version=5),
        entry(version=3, api_key=ApiKey.FETCH, min_version=16, max_version=18),  # none the proxy reads
        entry(version=3, api_key=ApiKey.HEARTBEAT, min_version=0, max_version=9),
    ]
    assert [(e.api_key, e.min_version, e.max_version) for e in cap_api_versions(offered)] == [
        (ApiKey.API_VERSIONS, 0, MAX_VERSIONS[ApiKey.API_VERSIONS]),
        (ApiKey.HEARTBEAT, 0, 9),
    ]
