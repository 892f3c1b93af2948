from struct import pack, unpack_from

import pytest
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.producer import ProduceResponse

from quotagate.protocol.apis import RESPONSE_CLASSES, ApiKey, response_header_is_flexible
from quotagate.protocol.framing import FrameError
from quotagate.protocol.headers import response_body_offset
from quotagate.protocol.throttle import patch_throttle_time, throttle_time_offset
from quotagate.quotas import apis
from tests.support.messages import produce_response as shared_produce_response

UPSTREAM = 1234
HIGHER = 5000
LOWER = 1000
CORRELATION_ID = 5


def has_throttle_field(api_key: int, version: int) -> bool:
    field = RESPONSE_CLASSES[api_key].fields.get("throttle_time_ms")
    return field is not None and field.for_version_q(version)


KNOWN_VERSIONS = [(key, v) for key in sorted(RESPONSE_CLASSES) for v in range(RESPONSE_CLASSES[key].max_version + 1)]
KNOWN_IDS = [f"{RESPONSE_CLASSES[key].__name__.removesuffix('Response')}-v{v}" for key, v in KNOWN_VERSIONS]
THROTTLED = [(key, v) for key, v in KNOWN_VERSIONS if has_throttle_field(key, v)]
THROTTLED_IDS = [name for (key, v), name in zip(KNOWN_VERSIONS, KNOWN_IDS, strict=True) if has_throttle_field(key, v)]


def response_frame(api_key: int, version: int, message, header_tags: bytes = b"\x00") -> memoryview:
    header = pack(">i", CORRELATION_ID) + (header_tags if response_header_is_flexible(api_key, version) else b"")
    body = bytes(message.encode(version=version))
    return memoryview(pack(">i", len(header) + len(body)) + header + body)


def populated(data_class, version: int, depth: int = 0, **values):
    """A message with one element in every array of structs (tagged ones included), recursively."""
    for name, field in data_class.fields.items():
        if name in values or not field.for_version_q(version):
            continue
        if field.is_struct_array() and depth < 4:
            values[name] = [populated(field.data_class, version, depth + 1)]
        elif field.is_struct() and field.data_class is not None:
            values[name] = populated(field.data_class, version, depth + 1)
    return data_class(version=version, **values)


def messages(api_key: int, version: int, **values) -> list:
    cls = RESPONSE_CLASSES[api_key]
    return [cls(version=version, **values), populated(cls, version, **values)]


def decode(frame, api_key: int, version: int):
    view = memoryview(frame)
    return RESPONSE_CLASSES[api_key].decode(view[response_body_offset(view, api_key, version) :], version=version)


def assert_patched(frame: memoryview, api_key: int, version: int, upstream: int) -> None:
    """Patching up to HIGHER changes those 4 bytes only, and kafka-python reads HIGHER back."""
    offset = throttle_time_offset(frame, api_key, version)
    out, current = patch_throttle_time(frame, api_key, version, HIGHER)
    assert current == upstream
    assert isinstance(out, bytes) and len(out) == len(frame)
    assert out[:offset] == frame[:offset] and out[offset + 4 :] == frame[offset + 4 :]
    patched, original = decode(out, api_key, version), decode(frame, api_key, version)
    assert patched.throttle_time_ms == HIGHER
    patched.throttle_time_ms = upstream
    assert patched == original


@pytest.mark.parametrize(("api_key", "version"), KNOWN_VERSIONS, ids=KNOWN_IDS)
def test_offset_points_at_throttle_time_in_every_known_response_version(api_key: int, version: int) -> None:
    if not has_throttle_field(api_key, version):
        for message in messages(api_key, version):
            assert throttle_time_offset(response_frame(api_key, version, message), api_key, version) is None
        return
    for message in messages(api_key, version, throttle_time_ms=UPSTREAM):
        frame = response_frame(api_key, version, message)
        offset = throttle_time_offset(frame, api_key, version)
        assert offset is not None
        assert unpack_from(">i", frame, offset)[0] == UPSTREAM


@pytest.mark.parametrize(("api_key", "version"), THROTTLED, ids=THROTTLED_IDS)
def test_patching_higher_changes_only_throttle_time(api_key: int, version: int) -> None:
    for message in messages(api_key, version, throttle_time_ms=UPSTREAM):
        assert_patched(response_frame(api_key, version, message), api_key, version, UPSTREAM)


@pytest.mark.parametrize(("api_key", "version"), KNOWN_VERSIONS, ids=KNOWN_IDS)
def test_nothing_to_raise_returns_the_very_same_frame(api_key: int, version: int) -> None:
    if has_throttle_field(api_key, version):
        frame = response_frame(
            api_key, version, populated(RESPONSE_CLASSES[api_key], version, throttle_time_ms=UPSTREAM)
        )
        for throttle_ms in (LOWER, UPSTREAM, 0, -1):
            out, current = patch_throttle_time(frame, api_key, version, throttle_ms)
            assert out is frame and current == UPSTREAM
    else:
        frame = response_frame(api_key, version, populated(RESPONSE_CLASSES[api_key], version))
        out, current = patch_throttle_time(frame, api_key, version, HIGHER)
        assert out is frame and current == 0


def test_throttle_time_is_the_first_body_field_except_in_produce_api_versions_and_offset_delete() -> None:
    exceptions = set()
    for api_key, version in KNOWN_VERSIONS:
        if has_throttle_field(api_key, version):
            frame = response_frame(api_key, version, populated(RESPONSE_CLASSES[api_key], version))
            if throttle_time_offset(frame, api_key, version) != response_body_offset(frame, api_key, version):
                exceptions.add(api_key)
    assert exceptions == {ApiKey.PRODUCE, ApiKey.API_VERSIONS, 47}


def test_apis_without_throttle_time_in_any_version_are_not_throttleable() -> None:
    never = {
        key for key in RESPONSE_CLASSES if not any(has_throttle_field(key, v) for k, v in KNOWN_VERSIONS if k == key)
    }
    assert never == {17, 27, 36, 55}  # SaslHandshake, WriteTxnMarkers, SaslAuthenticate, DescribeQuorum


def produce_response(version: int, throttle: int, endpoints: bool = False) -> ProduceResponse:
    return shared_produce_response(version, throttle, endpoints, topics=3, partitions=4)


@pytest.mark.parametrize("version", range(1, ProduceResponse.max_version + 1))
def test_produce_throttle_time_is_found_behind_many_partition_results(version: int) -> None:
    frame = response_frame(ApiKey.PRODUCE, version, produce_response(version, UPSTREAM))
    assert unpack_from(">i", frame, throttle_time_offset(frame, ApiKey.PRODUCE, version))[0] == UPSTREAM
    assert_patched(frame, ApiKey.PRODUCE, version, UPSTREAM)


@pytest.mark.parametrize("version", range(10, ProduceResponse.max_version + 1))
def test_produce_node_endpoints_behind_throttle_time_survive_patching(version: int) -> None:
    frame = response_frame(ApiKey.PRODUCE, version, produce_response(version, UPSTREAM, endpoints=True))
    assert_patched(frame, ApiKey.PRODUCE, version, UPSTREAM)


def api_versions_response(version: int, error_code: int = 0) -> ApiVersionsResponse:
    entry = ApiVersionsResponse.ApiVersion
    keys = [(k, 0, 3 + k % 7) for k in range(0, 80, 3)]
    fields = {}
    if version >= 3:
        feature = ApiVersionsResponse.SupportedFeatureKey
        fields["supported_features"] = [
            feature(version=version, name="metadata.version", min_version=1, max_version=27)
        ]
        fields["finalized_features_epoch"] = 42
    return ApiVersionsResponse(
        version=version,
        error_code=error_code,
        api_keys=[entry(version=version, api_key=k, min_version=lo, max_version=hi) for k, lo, hi in keys],
        throttle_time_ms=UPSTREAM,
        **fields,
    )


@pytest.mark.parametrize("version", range(1, ApiVersionsResponse.max_version + 1))
def test_api_versions_throttle_time_is_found_behind_the_api_keys(version: int) -> None:
    frame = response_frame(ApiKey.API_VERSIONS, version, api_versions_response(version))
    assert frame[8:10] == b"\x00\x00", "ApiVersions responses keep header v0: the body starts at the error code"
    assert unpack_from(">i", frame, throttle_time_offset(frame, ApiKey.API_VERSIONS, version))[0] == UPSTREAM
    assert_patched(frame, ApiKey.API_VERSIONS, version, UPSTREAM)


@pytest.mark.parametrize("version", range(1, ApiVersionsResponse.max_version + 1))
def test_api_versions_unsupported_version_answer_has_a_v0_body_and_is_left_alone(version: int) -> None:
    # The broker answers a version it does not know in v0, whatever the request's version (KIP-511).
    frame = response_frame(ApiKey.API_VERSIONS, 0, api_versions_response(0, error_code=35))
    assert throttle_time_offset(frame, ApiKey.API_VERSIONS, version) is None
    assert patch_throttle_time(frame, ApiKey.API_VERSIONS, version, HIGHER)[0] is frame


def test_flexible_header_with_tagged_fields_is_skipped() -> None:
    message = RESPONSE_CLASSES[ApiKey.METADATA](version=12, throttle_time_ms=UPSTREAM)
    frame = response_frame(ApiKey.METADATA, 12, message, header_tags=b"\x01\x07\x03abc")
    assert throttle_time_offset(frame, ApiKey.METADATA, 12) == 8 + 6
    assert_patched(frame, ApiKey.METADATA, 12, UPSTREAM)


def test_throttle_beyond_int32_is_capped() -> None:
    frame = response_frame(ApiKey.FETCH, 12, RESPONSE_CLASSES[ApiKey.FETCH](version=12, throttle_time_ms=UPSTREAM))
    out, _ = patch_throttle_time(frame, ApiKey.FETCH, 12, 2**40)
    assert decode(out, ApiKey.FETCH, 12).throttle_time_ms == 2**31 - 1


@pytest.mark.parametrize(
    ("api_key", "version", "cut"),
    [
        (ApiKey.METADATA, 12, 9),  # header only
        (ApiKey.METADATA, 12, 8),  # flexible header without its tagged fields
        (ApiKey.FETCH, 4, 10),  # half a throttle time
        (ApiKey.PRODUCE, 9, 40),  # inside the partition results
        (ApiKey.API_VERSIONS, 2, 20),  # inside the api keys
        (ApiKey.API_VERSIONS, 3, 9),  # inside the error code
        (47, 0, 11),  # OffsetDelete: behind the error code
    ],
)
def test_truncated_responses_raise_frame_error(api_key: int, version: int, cut: int) -> None:
    if api_key == ApiKey.PRODUCE:
        message = produce_response(version, UPSTREAM)
    elif api_key == ApiKey.API_VERSIONS:
        message = api_versions_response(version)
    else:
        message = RESPONSE_CLASSES[api_key](version=version, throttle_time_ms=UPSTREAM)
    frame = response_frame(api_key, version, message)[:cut]
    with pytest.raises(FrameError):
        throttle_time_offset(frame, api_key, version)
    with pytest.raises(FrameError):
        patch_throttle_time(frame, api_key, version, HIGHER)


# Hand-built responses of APIs kafka-python does not know (layouts from Apache Kafka's schemas).


def string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else pack(">h", -1)
    data = value.encode()
    return bytes([len(data) + 1]) + data if flexible else pack(">h", len(data)) + data


def blob(data: bytes, flexible: bool) -> bytes:
    return bytes([len(data) + 1]) + data if flexible else pack(">i", len(data)) + data


def array(items: list[bytes], flexible: bool) -> bytes:
    return (bytes([len(items) + 1]) if flexible else pack(">i", len(items))) + b"".join(items)


def hand_frame(body: bytes, flexible: bool) -> memoryview:
    header = pack(">i", CORRELATION_ID) + (b"\x00" if flexible else b"")
    return memoryview(pack(">i", len(header) + len(body)) + header + body)


def assert_hand_patched(frame: memoryview, api_key: int, version: int, offset: int) -> None:
    assert throttle_time_offset(frame, api_key, version) == offset
    assert unpack_from(">i", frame, offset)[0] == UPSTREAM
    out, current = patch_throttle_time(frame, api_key, version, HIGHER)
    assert current == UPSTREAM
    assert out == bytes(frame[:offset]) + pack(">i", HIGHER) + bytes(frame[offset + 4 :])
    lower, _ = patch_throttle_time(frame, api_key, version, LOWER)
    assert lower is frame


def test_consumer_group_heartbeat_throttle_time_is_first_after_a_flexible_header() -> None:
    body = (
        pack(">ih", UPSTREAM, 0)
        + string(None, True)
        + string("member-1", True)
        + pack(">ii", 3, 5000)
        + b"\xff"  # null assignment
        + b"\x00"
    )
    assert_hand_patched(hand_frame(body, flexible=True), 68, 0, 9)
    assert_hand_patched(hand_frame(body, flexible=True), 68, 1, 9)


def test_share_fetch_throttle_time_is_first() -> None:
    body = pack(">ih", UPSTREAM, 0) + string(None, True) + pack(">i", 30000) + array([], True) * 2 + b"\x00"
    assert_hand_patched(hand_frame(body, flexible=True), ApiKey.SHARE_FETCH, 1, 9)


def test_share_group_describe_has_throttle_time_from_v1_only() -> None:
    body = pack(">i", UPSTREAM) + array([], True) + b"\x00"
    assert_hand_patched(hand_frame(body, flexible=True), 77, 1, 9)
    frame = hand_frame(body, flexible=True)
    assert throttle_time_offset(frame, 77, 0) is None
    assert patch_throttle_time(frame, 77, 0, HIGHER) == (frame, 0)


@pytest.mark.parametrize(("api_key", "version"), [(39, 1), (39, 2), (40, 1), (40, 2)])
def test_renew_and_expire_delegation_token_throttle_time_follows_error_and_expiry(api_key: int, version: int) -> None:
    flexible = version >= 2
    body = pack(">hqi", 0, 1_700_000_000_000, UPSTREAM) + (b"\x00" if flexible else b"")
    assert_hand_patched(hand_frame(body, flexible), api_key, version, 8 + flexible + 10)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_create_delegation_token_throttle_time_is_the_last_field(version: int) -> None:
    flexible = version >= 2
    body = pack(">h", 0) + string("User", flexible) + string("alice", flexible)
    if version >= 3:
        body += string("User", flexible) + string("bob", flexible)
    body += pack(">qqq", 1, 2, 3) + string("token-id", flexible) + blob(b"\x01" * 32, flexible)
    offset = 8 + flexible + len(body)
    body += pack(">i", UPSTREAM) + (b"\x00" if flexible else b"")
    assert_hand_patched(hand_frame(body, flexible), 38, version, offset)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_describe_delegation_token_throttle_time_follows_the_tokens(version: int) -> None:
    flexible = version >= 2
    tags = b"\x00" if flexible else b""
    renewer = string("User", flexible) + string("carol", flexible) + tags
    token = string("User", flexible) + string("alice", flexible)
    if version >= 3:
        token += string("User", flexible) + string("bob", flexible)
    token += pack(">qqq", 1, 2, 3) + string("id", flexible) + blob(b"\x02" * 16, flexible)
    token += array([renewer, renewer], flexible) + tags
    body = pack(">h", 0) + array([token, token], flexible)
    offset = 8 + flexible + len(body)
    body += pack(">i", UPSTREAM) + tags
    assert_hand_patched(hand_frame(body, flexible), 41, version, offset)


def test_describe_delegation_token_tagged_fields_behind_throttle_time_do_not_mislead() -> None:
    body = pack(">h", 0) + array([], True)
    offset = 8 + 1 + len(body)
    body += pack(">i", UPSTREAM) + b"\x01\x05\x01\x00"  # one unknown tag whose data ends in a zero byte
    assert_hand_patched(hand_frame(body, flexible=True), 41, 3, offset)


@pytest.mark.parametrize("version", [1, 3])
def test_truncated_delegation_token_responses_raise_frame_error(version: int) -> None:
    flexible = version >= 2
    body = pack(">h", 0) + string("User", flexible) + string("alice", flexible) + pack(">q", 1)
    for api_key in (38, 41):
        with pytest.raises(FrameError):
            throttle_time_offset(hand_frame(body, flexible), api_key, version)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(ApiKey.PRODUCE, 14), (ApiKey.API_VERSIONS, 5), (47, 1), (38, 4), (39, 3), (40, 3), (41, 4)],
)
def test_throttle_time_behind_other_fields_is_not_guessed_in_unknown_versions(api_key: int, version: int) -> None:
    frame = hand_frame(pack(">hi", 0, UPSTREAM) + bytes(64) + b"\x00", flexible=True)
    assert throttle_time_offset(frame, api_key, version) is None
    assert patch_throttle_time(frame, api_key, version, HIGHER)[0] is frame


@pytest.mark.parametrize(
    ("api_key", "version"), [(ApiKey.FETCH, 19), (ApiKey.METADATA, 14), (68, 7), (78, 3), (93, 0), (94, 0)]
)
def test_leading_throttle_time_is_trusted_in_newer_versions(api_key: int, version: int) -> None:
    assert_hand_patched(hand_frame(pack(">ih", UPSTREAM, 0) + b"\x00", flexible=True), api_key, version, 9)


@pytest.mark.parametrize("api_key", [4, 7, 52, 53, 54, 83, 87, 95, 200, -1])
def test_apis_in_neither_table_are_never_patched(api_key: int) -> None:
    frame = hand_frame(pack(">ih", UPSTREAM, 0) + b"\x00", flexible=True)
    assert throttle_time_offset(frame, api_key, 0) is None
    assert patch_throttle_time(frame, api_key, 0, HIGHER) == (frame, 0)
    assert patch_throttle_time(frame, api_key, 0, HIGHER)[0] is frame


def test_cluster_apis_are_exempt_and_client_facing_ones_are_not() -> None:
    brief = {4, 5, 6, 7, 27, 52, 53, 54, 55, 56, 58, 62, 63, 67}
    exempt = {key for key in range(128) if not apis.policy(key) & apis.REQUEST_TIME} - {17, 36}  # but SASL's
    assert brief <= exempt
    assert exempt - brief == {83, 84, 85, 86, 87}  # share-group state, clusterAction in ApiKeys.java
    for api_key in (0, 1, 3, 18, 57, 59, 64, 68, 78):  # incl. UpdateFeatures, FetchSnapshot, UnregisterBroker
        assert api_key not in exempt
