"""DescribeClientQuotas and AlterClientQuotas answered by the session from the proxy's own quotas:
bytes in, the response out; the quotas in force change live. An AlterClientQuotas never reaches the
broker; a DescribeClientQuotas goes to it first (describe_access "broker"), whose verdict on the
principal decides, and is then answered from the proxy's quotas."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from kafka.protocol.admin import AlterClientQuotasResponse, DescribeClientQuotasResponse

from quotagate.config import load_config
from quotagate.config.quota_state import load_state, save_state
from quotagate.protocol.client_quotas import DescribeResult, describe_response
from quotagate.protocol.headers import response_body_offset
from quotagate.proxy.quota_admin import QuotaAdmin
from quotagate.proxy.session import Session
from quotagate.quotas import DEFAULT, QuotaEntity, QuotaKey, QuotaTable
from quotagate.quotas.admin import effective
from quotagate.quotas.entities import MAX_PREFIX_CHARS, IpQuotaKey
from tests.support.admin_quotas import alter_request, describe_request
from tests.support.builds import Build
from tests.support.session_double import services_for

FILE_QUOTAS = """
[[quotas]]
user = "alice"
producer_byte_rate = 1000

[[quotas]]
user = "<default>"
client_id = "<default>"
consumer_byte_rate = 5000
"""
ALTER, DESCRIBE = 49, 48


def admin_session(
    principals: tuple[str, ...] = ("admin",),
    user: str = "admin",
    state: Path | None = None,
    session_class: type[Session] = Session,
) -> tuple[Session, QuotaAdmin]:
    services = services_for(FILE_QUOTAS)
    engine = services.engine
    admin = QuotaAdmin(
        engine.table, {}, principals, state, lambda quotas, now: engine.update(quotas, engine.windows, now)
    )
    session = session_class(replace(services, quota_admin=admin))
    session.user = user
    session.broker_connected(0.0)
    return session, admin


def broker_describe_answer(correlation_id: int, version: int, error_code: int = 0) -> bytes:
    """The broker's own DescribeClientQuotas answer: no quotas, or a refusal."""
    message = "Cluster authorization failed." if error_code else None
    return describe_response(correlation_id, version, DescribeResult(error_code, message, ()))


def answer(session: Session, request: bytes, api_key: int, version: int = 1, broker_error: int = 0):  # type: ignore[no-untyped-def]
    session.client_data(request, 1.0)
    if api_key == DESCRIBE and session.services.quota_admin.describe_access == "broker":
        assert session.to_broker == [request], "a describe is asked of the broker first"
        session.to_broker.clear()
        assert session.to_client == []
        session.broker_data(broker_describe_answer(8, version, broker_error), 1.0)
    assert session.to_broker == [], "a quota admin request must not reach the broker"
    frame = memoryview(b"".join(session.to_client))
    session.to_client.clear()
    cls = AlterClientQuotasResponse if api_key == ALTER else DescribeClientQuotasResponse
    return cls.decode(frame[response_body_offset(frame, api_key, version) :], version=version)


def described(response) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:  # type: ignore[no-untyped-def]
    assert response.error_code == 0, response.error_message
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }


@pytest.mark.parametrize("version", [0, 1])
def test_alter_sets_a_user_quota_that_binds_at_once_and_describe_shows_it(version: int, build: Build) -> None:
    session, admin = admin_session(session_class=build.session)
    response = answer(
        session,
        alter_request([([("user", "bob")], [("producer_byte_rate", 2048.0, False)])], version=version),
        ALTER,
        version,
    )
    assert [(e.error_code, e.error_message) for e in response.entries] == [(0, None)]
    resolution = session.services.engine.resolve("bob", "any-app", QuotaKey.PRODUCER_BYTE_RATE)
    assert resolution is not None and resolution.value == 2048.0
    everything = described(answer(session, describe_request([], version=version), DESCRIBE, version))
    assert everything == {
        (("user", "alice"),): {"producer_byte_rate": 1000.0},
        (("client-id", None), ("user", None)): {"consumer_byte_rate": 5000.0},
        (("user", "bob"),): {"producer_byte_rate": 2048.0},
    }
    assert admin.source(QuotaEntity("bob"), QuotaKey.PRODUCER_BYTE_RATE) == "api"
    assert admin.source(QuotaEntity("alice"), QuotaKey.PRODUCER_BYTE_RATE) == "file"


def test_describe_filters_exact_default_any_and_strict(build: Build) -> None:
    session, _ = admin_session(session_class=build.session)
    answer(
        session,
        alter_request([([("user", "alice"), ("client-id", "app")], [("request_percentage", 50.0, False)])]),
        ALTER,
    )
    exact = described(answer(session, describe_request([("user", 0, "alice")]), DESCRIBE))
    assert set(exact) == {(("user", "alice"),), (("client-id", "app"), ("user", "alice"))}
    strict = described(answer(session, describe_request([("user", 0, "alice")], strict=True), DESCRIBE))
    assert set(strict) == {(("user", "alice"),)}
    default = described(answer(session, describe_request([("user", 1, None)]), DESCRIBE))
    assert set(default) == {(("client-id", None), ("user", None))}
    any_client = described(answer(session, describe_request([("client-id", 2, None)]), DESCRIBE))
    assert set(any_client) == {(("client-id", None), ("user", None)), (("client-id", "app"), ("user", "alice"))}


@pytest.mark.parametrize(
    ("components", "code"),
    [
        ([("user", 0, None)], 42),  # exact without a name
        ([("user", 1, "x")], 42),  # default with a name
        ([("user", 0, "a"), ("user", 0, "b")], 42),  # a type twice
        ([("ip", 2, None), ("user", 2, None)], 42),  # ip mixed with user
        ([("group", 2, None)], 35),  # an unknown entity type
    ],
)
def test_describe_refuses_bad_filters_as_the_broker_does(components: list, code: int, build: Build) -> None:
    session, _ = admin_session(session_class=build.session)
    response = answer(session, describe_request(components), DESCRIBE)
    assert response.error_code == code
    assert response.entries is None


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        ([("user", "bob")], [("producer_byte_rate", 0.0, False)], "Quota producer_byte_rate must be greater than 0"),
        ([("user", "bob")], [("producer_byte_rate", -5.0, False)], "Quota producer_byte_rate must be greater than 0"),
        ([("user", "bob")], [("producer_byte_rate", 1.5, False)], "producer_byte_rate cannot be a fractional value."),
        ([("user", "bob")], [("bogus_rate", 1.0, False)], "Invalid configuration key bogus_rate"),
        ([], [("producer_byte_rate", 1.0, False)], "Invalid empty client quota entity"),
        ([("user", "")], [("producer_byte_rate", 1.0, False)], "Empty user not supported"),
        ([("group", "g")], [("producer_byte_rate", 1.0, False)], "Unhandled client quota entity type: group"),
        (
            [("user", "bob")],
            [("producer_byte_rate", 1.0, False), ("producer_byte_rate", 2.0, False)],
            "Ignoring duplicate entity ClientQuotaEntity(entries={user=bob})",
        ),
    ],
)
def test_alter_refuses_invalid_entities_and_values_with_invalid_request(entity, ops, message, build: Build) -> None:  # type: ignore[no-untyped-def]
    session, admin = admin_session(session_class=build.session)
    response = answer(session, alter_request([(entity, ops)]), ALTER)
    assert response.entries[0].error_code == 42
    assert message in response.entries[0].error_message
    assert admin.api_quotas == {}


def test_only_the_listed_principals_may_alter_and_validate_only_changes_nothing(build: Build) -> None:
    session, admin = admin_session(session_class=build.session, principals=("User:admin",), user="ANONYMOUS")
    response = answer(session, alter_request([([("user", "bob")], [("producer_byte_rate", 10.0, False)])]), ALTER)
    assert response.entries[0].error_code == 31  # CLUSTER_AUTHORIZATION_FAILED
    assert admin.api_quotas == {}
    session.user = "admin"
    response = answer(
        session, alter_request([([("user", "bob")], [("producer_byte_rate", 10.0, False)])], validate_only=True), ALTER
    )
    assert response.entries[0].error_code == 0
    assert admin.api_quotas == {}
    assert session.services.engine.resolve("bob", "x", QuotaKey.PRODUCER_BYTE_RATE) is None


def test_a_describe_the_broker_refuses_gets_the_brokers_answer_and_none_of_the_proxys_quotas(build: Build) -> None:
    session, _ = admin_session(user="alice", session_class=build.session)
    response = answer(session, describe_request([]), DESCRIBE, broker_error=31)
    assert (response.error_code, response.error_message, response.entries) == (
        31,
        "Cluster authorization failed.",
        None,
    )


def test_the_proxys_answer_carries_the_throttle_the_broker_asked_for(build: Build) -> None:
    session, _ = admin_session(session_class=build.session)
    session.client_data(describe_request([]), 1.0)
    taken = session.to_broker[:]
    session.to_broker.clear()
    assert taken == [describe_request([])]
    broker = describe_response(8, 1, DescribeResult(0, None, ()), throttle_ms=250)
    session.broker_data(broker, 1.0)
    frame = memoryview(b"".join(session.to_client))
    response = DescribeClientQuotasResponse.decode(frame[response_body_offset(frame, DESCRIBE, 1) :], version=1)
    assert response.throttle_time_ms == 250 and len(response.entries) == 2


@pytest.mark.parametrize(
    ("access", "user", "code"),
    [("alter_principals", "admin", 0), ("alter_principals", "alice", 31), ("anyone", "alice", 0)],
)
def test_describe_access_other_than_the_broker_is_answered_by_the_proxy_alone(
    access: str, user: str, code: int, build: Build
) -> None:
    session, admin = admin_session(user=user, session_class=build.session)
    admin.set_access(("admin",), access)
    response = answer(session, describe_request([]), DESCRIBE)
    assert response.error_code == code, response.error_message


def test_an_alter_from_a_user_who_may_not_alter_is_answered_from_its_bytes_as_the_broker_does(build: Build) -> None:
    session, _ = admin_session(user="mallory", session_class=build.session)
    entries = [([("user", f"u{i}"), ("client-id", None)], [("producer_byte_rate", 1.0, False)]) for i in range(50)]
    response = answer(session, alter_request(entries), ALTER)
    assert [(e.error_code, e.error_message) for e in response.entries] == [(31, "Cluster authorization failed.")] * 50
    assert [[(p.entity_type, p.entity_name) for p in e.entity] for e in response.entries] == [
        [("user", f"u{i}"), ("client-id", None)] for i in range(50)
    ]


def test_removing_a_file_quota_through_the_api_hides_it_until_set_again(build: Build) -> None:
    session, _ = admin_session(session_class=build.session)
    answer(session, alter_request([([("user", "alice")], [("producer_byte_rate", 0.0, True)])]), ALTER)
    assert session.services.engine.resolve("alice", "x", QuotaKey.PRODUCER_BYTE_RATE) is None
    answer(session, alter_request([([("user", "alice")], [("producer_byte_rate", 300.0, False)])]), ALTER)
    resolution = session.services.engine.resolve("alice", "x", QuotaKey.PRODUCER_BYTE_RATE)
    assert resolution is not None and resolution.value == 300.0


def test_alter_keeps_the_bucket_debt(build: Build) -> None:
    session, _ = admin_session(session_class=build.session)
    engine = session.services.engine
    assert engine.charge("alice", "x", QuotaKey.PRODUCER_BYTE_RATE, 20_000, 1.0) > 0  # burst 11000: in debt
    answer(session, alter_request([([("user", "alice")], [("producer_byte_rate", 2000.0, False)])]), ALTER)
    resolution = engine.resolve("alice", "x", QuotaKey.PRODUCER_BYTE_RATE)
    assert resolution is not None and engine.tokens(resolution, 1.0) < 0


def test_state_file_round_trips_and_is_replaced_atomically(tmp_path: Path, build: Build) -> None:
    (tmp_path / "quotagate.toml").write_text('[proxy]\nbootstrap_servers = ["k:1"]\n')
    path = Path(load_config(tmp_path / "quotagate.toml").admin.state_file)
    assert path == tmp_path / "quotagate.toml.quotas.json"
    assert load_state(path) == {}
    session, _ = admin_session(session_class=build.session, state=path)
    answer(
        session, alter_request([([("user", None), ("client-id", "app")], [("consumer_byte_rate", 64.0, False)])]), ALTER
    )
    answer(session, alter_request([([("user", "alice")], [("producer_byte_rate", 0.0, True)])]), ALTER)
    state = load_state(path)
    assert state == {
        QuotaEntity(DEFAULT, "app"): {QuotaKey.CONSUMER_BYTE_RATE: 64.0},
        QuotaEntity("alice"): {QuotaKey.PRODUCER_BYTE_RATE: None},
    }
    assert json.loads(path.read_text())["version"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quotagate.toml", path.name]  # no temporary file left
    save_state(path, {})
    assert load_state(path) == {}


def test_effective_quotas_lay_the_api_over_the_file() -> None:
    file = QuotaTable({QuotaEntity("a"): {QuotaKey.PRODUCER_BYTE_RATE: 1.0, QuotaKey.CONSUMER_BYTE_RATE: 2.0}})
    api = {QuotaEntity("a"): {QuotaKey.PRODUCER_BYTE_RATE: 5.0, QuotaKey.CONSUMER_BYTE_RATE: None}}
    assert dict(effective(file, api).items()) == {QuotaEntity("a"): {QuotaKey.PRODUCER_BYTE_RATE: 5.0}}


SHADOW_QUOTAS = """
quota_window_num = 1
[proxy]
bootstrap_servers = ["127.0.0.1:1"]
port = 1

[[quotas]]
user = "alice"
producer_byte_rate = 1000
shadow = true
"""


def test_a_shadow_quota_charges_but_never_throttles_and_says_what_it_would_have_done() -> None:
    from quotagate.config import parse_config
    from quotagate.quotas import QuotaEngine

    config = parse_config(SHADOW_QUOTAS)
    engine = QuotaEngine(config.quotas, config.windows)
    buckets = engine.entity_buckets("alice", "app", 0.0)
    assert buckets.shadow
    from quotagate.quotas.apis import policy
    from quotagate.quotas.charging import charge_request, shadow_throttle_ms

    # Burst 1000 (one window): 3000 bytes leave 2000 of debt, 2 s of throttle, none applied.
    assert charge_request(buckets, policy(0), 3000, 0.0) == 0
    assert engine.throttle_ms("alice", "app", QuotaKey.PRODUCER_BYTE_RATE, 0.0) == 0
    assert shadow_throttle_ms(buckets, policy(0), False, 0.0) == 2000
    # Made binding by a reload: the debt is kept and now throttles.
    binding = parse_config(SHADOW_QUOTAS.replace("shadow = true\n", ""))
    engine.update(binding.quotas, binding.windows, 0.5)
    assert engine.throttle_ms("alice", "app", QuotaKey.PRODUCER_BYTE_RATE, 0.5) == 1500


def test_a_shadow_mutation_quota_admits_every_topic_in_strict_mode() -> None:
    from quotagate.quotas import QuotaEngine

    table = QuotaTable(
        {QuotaEntity("alice"): {QuotaKey.CONTROLLER_MUTATION_RATE: 1.0}}, frozenset({QuotaEntity("alice")})
    )
    engine = QuotaEngine(table)
    key = QuotaKey.CONTROLLER_MUTATION_RATE
    assert engine.admit("alice", "x", key, [50, 50, 50], True, 0.0) == [True, True, True]
    assert engine.throttle_ms("alice", "x", key, 0.0) == 0


def test_file_shadow_flag_must_be_a_boolean() -> None:
    from quotagate.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"quotas\[0\]\.shadow"):
        parse_config(SHADOW_QUOTAS.replace("shadow = true", 'shadow = "yes"'))


def test_a_shadow_produce_quota_mutes_nothing_and_its_usage_record_says_what_it_would_have_done(build: Build) -> None:
    from quotagate.config.settings import UsageConfig
    from quotagate.proxy.usage import RequestCollector
    from tests.support.session_double import produce, produce_answer

    services = services_for('[[quotas]]\nclient_id = "app"\nproducer_byte_rate = 1000\nshadow = true\n')

    class Usage:  # the recorder's part the session uses: its configuration's kind of records, its collector
        config = UsageConfig(enabled=True, records="request")
        collector = RequestCollector(100)

        def dropped(self) -> None:
            raise AssertionError("the collector is not full")

    session = build.session(replace(services, usage=Usage()))  # type: ignore[arg-type]
    session.broker_connected(0.0)
    # Burst 11 kB; a 20 kB produce leaves ~9 kB of debt: ~9 s it would have been throttled.
    session.client_data(produce(1, {"t": b"r" * 20_000}), now=10.0)
    assert session.muted_until == 0.0
    session.broker_data(produce_answer(1, ["t"]), now=10.0)
    (record,) = Usage.collector.buffer
    assert record.throttle_ms == 0 and 8500 < record.shadow_throttle_ms < 9500, record
    stats = services.entity_metrics.stats[("ANONYMOUS", "app")]
    assert stats.shadow_throttled == 1 and stats.produce_throttle_seconds == 0


def test_api_versions_advertises_the_quota_apis_at_the_versions_the_proxy_answers() -> None:
    from types import SimpleNamespace

    from quotagate.protocol.version_caps import cap_api_versions

    offered = [SimpleNamespace(api_key=key, min_version=0, max_version=3) for key in (DESCRIBE, ALTER)]
    assert [(e.api_key, e.max_version) for e in cap_api_versions(offered)] == [(DESCRIBE, 1), (ALTER, 1)]


def test_a_shadow_quota_reports_the_time_it_would_have_held_the_entity_not_each_responses_debt() -> None:
    """Issue 26: 20 s at 1 MB/s against a 100 kB/s shadow quota summed every response's would-be
    throttle: 32 286 s. The time held at the quota is what went over it divided by it: (20 MB -
    the burst) / 100 kB/s; 199 s with one window's burst (100 kB)."""
    from quotagate.config import parse_config
    from quotagate.proxy.entity_metrics import EntityMetrics
    from quotagate.quotas import QuotaEngine
    from quotagate.quotas.apis import policy
    from quotagate.quotas.charging import charge_request, charge_response, shadow_throttle_ms

    config = parse_config(SHADOW_QUOTAS.replace("producer_byte_rate = 1000", "producer_byte_rate = 100000"))
    engine = QuotaEngine(config.quotas, config.windows)
    metrics = EntityMetrics(lambda: engine, lambda: 0.0, 10)
    buckets = engine.entity_buckets("alice", "app", 0.0)
    for i in range(2000):  # a 10 kB produce every 10 ms: 1 MB/s for 20 s
        now = i * 0.01
        charge_request(buckets, policy(0), 10_000, now)
        assert charge_response(buckets, policy(0), 50, 1.0, now) == 0  # never applied
        metrics.record_shadow("alice", "app", shadow_throttle_ms(buckets, policy(0), True, now), now)
    held = metrics.stats[("alice", "app")].shadow_throttle_seconds
    print(f"time held at the shadow quota: {held:.1f} s")
    burst = 1e5 * config.windows.burst_seconds(QuotaKey.PRODUCER_BYTE_RATE)
    assert held == pytest.approx((20e6 - burst) / 1e5, rel=0.01)


async def test_quotas_view_shows_the_throttle_a_shadow_entry_would_give() -> None:
    """Issue 26: /quotas showed throttle_ms 0 for a shadow entry 17 MB in debt."""
    from quotagate.config import parse_config
    from quotagate.proxy.admin_http import AdminHttpServer
    from quotagate.proxy.server import Proxy

    proxy = Proxy(parse_config(SHADOW_QUOTAS))
    now = proxy.loop.time()
    proxy.engine.charge("alice", "app", QuotaKey.PRODUCER_BYTE_RATE, 17_000_000 + 1000, now)
    proxy.entity_metrics.entity("alice", "app", now)
    (entity,) = AdminHttpServer(proxy).quota_state()["entities"]
    quota = entity["quotas"]["producer_byte_rate"]
    assert quota["shadow"] and quota["throttle_ms"] == pytest.approx(17_000_000, rel=0.01), quota


def test_alter_client_quotas_sets_a_prefix_quota_and_describe_filters_match_it(build: Build) -> None:
    session, admin = admin_session(session_class=build.session)
    response = answer(
        session,
        alter_request(
            [
                ([("client-id-prefix", "fleet-")], [("producer_byte_rate", 4096.0, False)]),
                ([("user", "alice"), ("client-id-prefix", "fleet-")], [("producer_byte_rate", 8192.0, False)]),
            ]
        ),
        ALTER,
    )
    assert [(e.error_code, e.error_message) for e in response.entries] == [(0, None), (0, None)]
    assert admin.api_quotas == {
        QuotaEntity(None, None, "fleet-"): {QuotaKey.PRODUCER_BYTE_RATE: 4096.0},
        QuotaEntity("alice", None, "fleet-"): {QuotaKey.PRODUCER_BYTE_RATE: 8192.0},
    }
    assert session.services.engine.resolve("bob", "fleet-3", QuotaKey.PRODUCER_BYTE_RATE).value == 4096.0
    exact = described(answer(session, describe_request([("client-id-prefix", 0, "fleet-")]), DESCRIBE))
    assert set(exact) == {(("client-id-prefix", "fleet-"),), (("client-id-prefix", "fleet-"), ("user", "alice"))}
    strict = described(answer(session, describe_request([("client-id-prefix", 2, None)], strict=True), DESCRIBE))
    assert set(strict) == {(("client-id-prefix", "fleet-"),)}
    # A prefix is not a client id: a client-id filter does not match it, nor an exact name it starts.
    assert (("client-id-prefix", "fleet-"),) not in described(
        answer(session, describe_request([("client-id", 2, None)]), DESCRIBE)
    )
    assert described(answer(session, describe_request([("client-id-prefix", 0, "fleet-3")]), DESCRIBE)) == {}
    assert described(answer(session, describe_request([("client-id-prefix", 1, None)]), DESCRIBE)) == {}
    mixed = answer(session, describe_request([("ip", 2, None), ("client-id-prefix", 2, None)]), DESCRIBE)
    assert mixed.error_code == 42


@pytest.mark.parametrize(
    ("entity", "message"),
    [
        ([("client-id-prefix", None)], "client-id-prefix has no default entity"),
        ([("client-id-prefix", "")], "Empty client-id-prefix not supported"),
        ([("client-id-prefix", "a"), ("client-id", "b")], "cannot be combined"),
        ([("client-id-prefix", "x" * (MAX_PREFIX_CHARS + 1))], "at most 103 characters"),
    ],
)
def test_alter_refuses_a_bad_prefix_entity_with_invalid_request(entity: list, message: str, build: Build) -> None:
    session, admin = admin_session(session_class=build.session)
    response = answer(session, alter_request([(entity, [("producer_byte_rate", 1.0, False)])]), ALTER)
    assert response.entries[0].error_code == 42
    assert message in response.entries[0].error_message
    assert admin.api_quotas == {}


def test_alter_client_quotas_sets_ip_quotas_as_kafka_configs_entity_type_ips_does(build: Build) -> None:
    session, admin = admin_session(session_class=build.session)
    response = answer(
        session,
        alter_request(
            [
                ([("ip", "127.0.0.1")], [("connection_creation_rate", 5.0, False)]),
                ([("ip", None)], [("connection_creation_rate", 100.0, False)]),  # --entity-default
            ]
        ),
        ALTER,
    )
    assert [(e.error_code, e.error_message) for e in response.entries] == [(0, None), (0, None)]
    assert admin.api_quotas == {
        QuotaEntity(ip="127.0.0.1"): {IpQuotaKey.CONNECTION_CREATION_RATE: 5.0},
        QuotaEntity(ip=DEFAULT): {IpQuotaKey.CONNECTION_CREATION_RATE: 100.0},
    }
    assert session.services.engine.table.resolve_ip("127.0.0.1").value == 5.0
    assert set(described(answer(session, describe_request([("ip", 2, None)]), DESCRIBE))) == {
        (("ip", "127.0.0.1"),),
        (("ip", None),),
    }
    assert described(answer(session, describe_request([("ip", 1, None)]), DESCRIBE)) == {
        (("ip", None),): {"connection_creation_rate": 100.0}
    }


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        ([("ip", "kafka-1")], [("connection_creation_rate", 1.0, False)], "kafka-1 is not a valid IP address"),
        ([("ip", "10.0.0.1")], [("producer_byte_rate", 1.0, False)], "Invalid configuration key producer_byte_rate"),
        (
            [("user", "bob")],
            [("connection_creation_rate", 1.0, False)],
            "Invalid configuration key connection_creation",
        ),
        ([("ip", "10.0.0.1")], [("connection_creation_rate", 2.5, False)], "cannot be a fractional value."),
        (
            [("ip", "10.0.0.1"), ("user", "bob")],
            [("connection_creation_rate", 1.0, False)],
            "Invalid quota entity combination",
        ),
    ],
)
def test_alter_refuses_bad_ip_entities_and_keys_with_invalid_request(
    entity: list, ops: list, message: str, build: Build
) -> None:
    session, admin = admin_session(session_class=build.session)
    response = answer(session, alter_request([(entity, ops)]), ALTER)
    assert response.entries[0].error_code == 42
    assert message in response.entries[0].error_message
    assert admin.api_quotas == {}


# What a Kafka 4.2 broker answered to the same requests (tests/integration/test_quota_admin_parity.py
# compares the two live): issue 37 item 5.
def test_an_entity_of_user_and_client_id_comes_back_as_client_id_then_user_as_the_broker_lists_it(
    build: Build,
) -> None:
    session, _ = admin_session(session_class=build.session)
    response = answer(
        session,
        alter_request([([("user", "alice"), ("client-id", "c1")], [("producer_byte_rate", 1000.0, False)])]),
        ALTER,
    )
    assert [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in response.entries] == [
        [("client-id", "c1"), ("user", "alice")]
    ]
    described_entries = answer(session, describe_request([("client-id", 0, "c1")]), DESCRIBE).entries
    assert [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in described_entries] == [
        [("client-id", "c1"), ("user", "alice")]
    ]


def test_an_entry_naming_client_id_twice_sets_the_quota_of_the_last_one_as_the_broker_does(build: Build) -> None:
    session, admin = admin_session(session_class=build.session)
    entity = [("user", "alice"), ("client-id", "a"), ("client-id", "b")]
    response = answer(session, alter_request([(entity, [("consumer_byte_rate", 2000.0, False)])]), ALTER)
    assert [(e.error_code, e.error_message) for e in response.entries] == [(0, None)]
    assert [(e.entity_type, e.entity_name) for e in response.entries[0].entity] == [
        ("client-id", "b"),
        ("user", "alice"),
    ]
    assert admin.api_quotas == {QuotaEntity("alice", "b"): {QuotaKey.CONSUMER_BYTE_RATE: 2000.0}}


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("producer_byte_rate", 0.0, False)], "Quota producer_byte_rate must be greater than 0"),
        ([("request_percentage", -1.0, False)], "Quota request_percentage must be greater than 0"),
        ([("consumer_byte_rate", 1.5, False)], "consumer_byte_rate cannot be a fractional value."),
        ([("producer_byte_rate", 1.9999999, False)], "producer_byte_rate cannot be a fractional value."),
        ([("producer_byte_rate", 1e19, False)], "Proposed value for producer_byte_rate is too large for a LONG."),
        # Kafka checks the keys in its HashMap's order: consumer_byte_rate before producer_byte_rate.
        (
            [("producer_byte_rate", -1.5, False), ("consumer_byte_rate", 2.5, False)],
            "consumer_byte_rate cannot be a fractional value.",
        ),
        ([("bogus_rate", 1.0, False)], "Invalid configuration key bogus_rate"),
    ],
)
def test_zero_negative_and_fractional_rates_are_refused_in_the_brokers_words(
    ops: list, message: str, build: Build
) -> None:
    session, admin = admin_session(session_class=build.session)
    response = answer(session, alter_request([([("user", "bob")], ops)]), ALTER)
    assert [(e.error_code, e.error_message) for e in response.entries] == [(42, message)]
    assert admin.api_quotas == {}


def test_removing_a_key_the_proxy_does_not_know_is_answered_as_the_broker_answers_it(build: Build) -> None:
    session, admin = admin_session(session_class=build.session)
    response = answer(
        session,
        alter_request([([("user", "bob")], [("bogus_rate", 0.0, True), ("producer_byte_rate", 1024.0, False)])]),
        ALTER,
    )
    assert [(e.error_code, e.error_message) for e in response.entries] == [(0, None)]
    assert admin.api_quotas == {QuotaEntity("bob"): {QuotaKey.PRODUCER_BYTE_RATE: 1024.0}}
    alone = answer(session, alter_request([([("user", "carol")], [("bogus_rate", 0.0, True)])]), ALTER)
    assert [(e.error_code, e.error_message) for e in alone.entries] == [(0, None)]
    assert QuotaEntity("carol") not in admin.api_quotas


def test_an_entity_named_twice_gets_one_result_and_the_first_entry_stays_applied_as_the_broker_does(
    build: Build,
) -> None:
    session, admin = admin_session(session_class=build.session)
    response = answer(
        session,
        alter_request(
            [
                ([("user", "x1")], [("producer_byte_rate", 1.0, False)]),
                ([("user", "x1")], [("consumer_byte_rate", 1.0, False)]),
            ]
        ),
        ALTER,
    )
    assert [(e.error_code, e.error_message) for e in response.entries] == [
        (42, "Ignoring duplicate entity ClientQuotaEntity(entries={user=x1})")
    ]
    assert admin.api_quotas == {QuotaEntity("x1"): {QuotaKey.PRODUCER_BYTE_RATE: 1.0}}


def test_results_come_in_the_brokers_order_and_a_described_entry_has_an_empty_message(build: Build) -> None:
    session, _ = admin_session(session_class=build.session)
    response = answer(
        session,
        alter_request(
            [
                ([("user", "y1")], [("producer_byte_rate", 1.0, False)]),
                ([("user", "y2")], [("producer_byte_rate", 1.0, False), ("request_percentage", 3.0, False)]),
                ([("client-id", "y3")], [("producer_byte_rate", 1.0, False)]),
                ([("user", "y4"), ("client-id", "z")], [("producer_byte_rate", 1.0, False)]),
                ([("ip", None)], [("connection_creation_rate", 10.0, False)]),
            ]
        ),
        ALTER,
    )
    assert [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in response.entries] == [
        [("user", "y1")],
        [("ip", None)],
        [("user", "y2")],
        [("client-id", "y3")],
        [("client-id", "z"), ("user", "y4")],
    ]
    y2 = answer(session, describe_request([("user", 0, "y2")]), DESCRIBE)
    assert (y2.error_code, y2.error_message) == (0, "")
    assert [(v.key, v.value) for v in y2.entries[0].values] == [
        ("request_percentage", 3.0),
        ("producer_byte_rate", 1.0),
    ]
    unknown_match = answer(session, describe_request([("user", 5, None)]), DESCRIBE)
    assert (unknown_match.error_code, unknown_match.error_message) == (42, "Unknown match type 5")


def test_a_describe_of_several_entities_lists_them_in_the_brokers_order(build: Build) -> None:
    session, admin = admin_session(session_class=build.session)
    admin.file_changed(QuotaTable({}))
    ops = [("producer_byte_rate", 1.0, False)]
    answer(session, alter_request([([("user", "alice"), ("client-id", "c1")], ops)]), ALTER)
    answer(
        session,
        alter_request(
            [
                ([("user", "y1")], ops),
                ([("user", "y2")], ops),
                ([("client-id", "y3")], ops),
                ([("user", None), ("client-id", None)], [("consumer_byte_rate", 1.0, False)]),
                ([("ip", None)], [("connection_creation_rate", 10.0, False)]),
            ]
        ),
        ALTER,
    )
    listed = [
        [(e.entity_type, e.entity_name) for e in entry.entity]
        for entry in answer(session, describe_request([]), DESCRIBE).entries
    ]
    # As a Kafka 4.2 broker holding the same quotas listed them; y2 and y3 share a bucket of its map,
    # where the order they were put in (the broker's history) decides, which the proxy does not have.
    assert listed[:3] == [[("user", "y1")], [("client-id", "c1"), ("user", "alice")], [("ip", None)]]
    assert sorted(listed[3:5]) == [[("client-id", "y3")], [("user", "y2")]]
    assert listed[5] == [("client-id", None), ("user", None)]
