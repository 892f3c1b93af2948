"""Tenants: [[tenants]] parsing, who is in which tenant, and how a tenant's bucket composes with a
member's own quota (quotas/tenants.py, quotas/engine.py)."""

import importlib
import json
import math
from pathlib import Path
from struct import unpack_from

import pytest
from prometheus_client import CollectorRegistry

from quotagate import compiled
from quotagate.config import ConfigError, parse_config
from quotagate.config.quota_state import load_levels, save_levels
from quotagate.config.reference import effective_toml
from quotagate.config.reload import applied_config, reload_report
from quotagate.config.settings import ClusterConfig
from quotagate.proxy.cluster import SharedQuotas
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.usage import AggregateCollector, QuotasInForce, RequestCollector, UsageRecord
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.apis import policy
from quotagate.quotas.bucket import MemberBucket, TokenBucket
from quotagate.quotas.charging import charge_request, shadow_throttle_ms
from quotagate.quotas.entities import MAX_CACHED_CLIENTS
from quotagate.quotas.explain import explain, explain_text
from quotagate.quotas.tenants import Tenant, Tenants
from tests.support.builds import Build
from tests.support.session_double import frames, produce, produce_answer, services_for, taken
from tests.support.usage import flushed, record

PRODUCE = QuotaKey.PRODUCER_BYTE_RATE
FETCH = QuotaKey.CONSUMER_BYTE_RATE
REQUEST = QuotaKey.REQUEST_PERCENTAGE
MUTATION = QuotaKey.CONTROLLER_MUTATION_RATE
BASE = '[proxy]\nbootstrap_servers = ["k:1"]\n'
WINDOWS = QuotaWindows(quota_window_num=1, controller_quota_window_num=1)  # burst = 1 s of quota
# The builds of the buckets' and the charging's one sources in this process (quotagate/compiled.py).
BUCKET_BUILDS = ["quotagate.quotas.token_bucket"] + (["quotagate.quotas.token_bucket_c"] if compiled.COMPILED else [])
CHARGING_BUILDS = ["quotagate.quotas.charging"] + (["quotagate.quotas.charging_c"] if compiled.COMPILED else [])

TENANTS = """
[[tenants]]
name = "payments"
users = ["alice", "bob"]
user_rules = ["RULE:^svc-payments-.*$/payments/", "RULE:^(PAYMENTS)-.*$/$1/L"]
client_id_prefixes = ["pay-"]
producer_byte_rate = 3000
consumer_byte_rate = 5000

[[tenants]]
name = "search"
client_ids = ["indexer"]
user_rules = ["RULE:^svc-.*$/search/"]
request_percentage = 50
shadow = true
"""


def test_tenants_are_parsed_with_their_members_quotas_and_shadow_and_written_back_the_same() -> None:
    config = parse_config(BASE + TENANTS)
    payments, search = config.tenants.tenants
    assert (payments.name, payments.users, payments.client_id_prefixes) == ("payments", ("alice", "bob"), ("pay-",))
    assert dict(payments.quotas) == {PRODUCE: 3000.0, FETCH: 5000.0} and not payments.shadow
    assert (search.client_ids, dict(search.quotas), search.shadow) == (("indexer",), {REQUEST: 50.0}, True)
    assert config.quotas.tenants is config.tenants  # the engine reads them with the quota table
    assert parse_config(effective_toml(config)) == config


@pytest.mark.parametrize(
    ("entry", "key", "problem"),
    [
        ('name = "t"\nusers = ["a"]\nproducer_byte_rate = nan', "tenants[0].producer_byte_rate", "finite"),
        ('name = "t"\nusers = ["a"]\nproducer_byte_rate = inf', "tenants[0].producer_byte_rate", "finite"),
        ('name = "t"\nusers = ["a"]\nproducer_byte_rate = 0', "tenants[0].producer_byte_rate", "greater than 0"),
        ('name = "t"\nusers = ["a"]\nproducer_byte_rate = 10.5', "tenants[0].producer_byte_rate", "Long value"),
        ('name = "t"\nusers = ["a"]\nproducer_byte_rate = 1e300', "tenants[0].producer_byte_rate", "at most"),
        ('name = "t"\nusers = ["a"]\nrequest_percentage = 1e-9', "tenants[0].request_percentage", "at least"),
        ('name = "t"\nusers = ["a"]\nconsumer_byte_rate = "1"', "tenants[0].consumer_byte_rate", "a number"),
        ('name = "t"\nusers = ["a"]\nconnection_creation_rate = 5', "tenants[0].connection_creation_rate", "unknown"),
        ('name = "t"\nusers = ["a"]\nuser = "a"', "tenants[0].user", "unknown key"),
        ('users = ["a"]', "tenants[0].name", "non-empty string"),
        (f'name = "{"t" * 129}"\nusers = ["a"]', "tenants[0].name", "at most 128"),
        ('name = "t"', "tenants[0]", "has no members"),
        ('name = "t"\nusers = "a"', "tenants[0].users", "array of non-empty strings"),
        ('name = "t"\nclient_ids = [""]', "tenants[0].client_ids", "array of non-empty strings"),
        ('name = "t"\nuser_rules = ["DEFAULT"]', "tenants[0].user_rules", "RULE:pattern/replacement/"),
        ('name = "t"\nuser_rules = ["^a.*$"]', "tenants[0].user_rules", "RULE:pattern/replacement/"),
        ('name = "t"\nuser_rules = ["RULE:(/t/"]', "tenants[0].user_rules", "invalid rule"),
        # A rule no user could be a member by: a typo in the result, and a pattern whose empty match at
        # the end Kafka's replaceAll replaces too (".*" maps every user to "tt").
        ('name = "t"\nuser_rules = ["RULE:^svc-.*$/tt/"]', "tenants[0].user_rules", "gives 'tt' for every user"),
        ('name = "t"\nuser_rules = ["RULE:.*/t/"]', "tenants[0].user_rules", "gives 'tt' for the user 't'"),
        ('name = "T"\nuser_rules = ["RULE:^svc-.*$/T/L"]', "tenants[0].user_rules", "gives 't' for every user"),
        ('name = "t"\nusers = ["a"]\nshadow = 1', "tenants[0].shadow", "true or false"),
        ('name = "t"\nusers = ["<default>"]', "tenants[0].users", "no one's name here"),
        ('name = "t"\nclient_id_prefixes = ["<default>"]', "tenants[0].client_id_prefixes", 'RULE:^.*$/t/"'),
    ],
)
def test_a_bad_tenant_entry_is_refused_naming_the_key(entry: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + "[[tenants]]\n" + entry + "\n")
    assert (info.value.key, problem in info.value.problem) == (key, True), info.value.problem


@pytest.mark.parametrize(
    ("second", "key", "problem"),
    [
        ('name = "a"\nusers = ["x"]', "tenants[1].name", "already a tenant's name"),
        ('name = "b"\nusers = ["alice"]', "tenants[1].users", "already a member rule of tenant 'a'"),
        ('name = "b"\nclient_id_prefixes = ["p-"]', "tenants[1].client_id_prefixes", "tenant 'a'"),
    ],
)
def test_the_same_exact_member_in_two_tenants_is_refused(second: str, key: str, problem: str) -> None:
    first = '[[tenants]]\nname = "a"\nusers = ["alice"]\nclient_id_prefixes = ["p-"]\n'
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + first + "[[tenants]]\n" + second + "\n")
    assert (info.value.key, problem in info.value.problem) == (key, True), info.value.problem


def test_tenants_must_be_an_array_of_tables() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + "[tenants]\nname = 'x'\n")
    assert info.value.key == "tenants"


@pytest.mark.parametrize(
    ("user", "client_id", "tenant"),
    [
        ("alice", "anything", "payments"),  # exact user
        ("svc-payments-7", "x", "payments"),  # a rule maps the user to the tenant's name
        ("PAYMENTS-batch", "x", "payments"),  # $1, lower-cased by /L
        ("carol", "pay-web", "payments"),  # client-id prefix
        ("carol", "indexer", "search"),  # exact client id
        ("svc-search-1", "x", "search"),  # the payments rule does not apply; search's does
        ("svc-payments-7", "indexer", "payments"),  # two tenants match: the first in the file
        ("svc-search-1", "pay-web", "payments"),  # the first by its prefix, before search's user rule
        ("carol", "pa", None),
        ("PAYMENTSx", "x", None),  # the pattern must match the whole user
    ],
)
def test_an_entity_is_in_the_first_tenant_whose_rules_match_it(user: str, client_id: str, tenant: str | None) -> None:
    tenants = parse_config(BASE + TENANTS).tenants
    found = tenants.tenant_of(user, client_id)
    assert (found.name if found else None) == tenant
    assert [t.name for t, _ in tenants.matching(user, client_id)][:1] == ([tenant] if tenant else [])


def test_resolution_memory_is_bounded_whatever_client_ids_a_client_invents() -> None:
    tenants = Tenants((Tenant("t", client_id_prefixes=("p-",)),))
    for n in range(3 * MAX_CACHED_CLIENTS):
        assert tenants.tenant_of("mallory", f"p-{n}" + "x" * 300) is not None
    assert len(tenants._cache) <= MAX_CACHED_CLIENTS
    assert max(len(client_id) for _, client_id in tenants._cache) <= 128


def test_a_client_inventing_client_ids_under_one_user_runs_the_user_rules_once() -> None:
    """The user rules' answer is kept per user: a new client id costs set look-ups and prefixes, not a
    regular expression per tenant (80 µs -> 16 µs a new client id with 50 tenants)."""
    calls = []

    class Counted:
        def __init__(self, rule: object) -> None:
            self.rule = rule

        def apply(self, user: str) -> str | None:
            calls.append(user)
            return self.rule.apply(user)

    tenants = parse_config(BASE + TENANTS).tenants
    for tenant in tenants.tenants:
        object.__setattr__(tenant, "rules", tuple(Counted(rule) for rule in tenant.rules))
    found = {tenants.tenant_of("svc-x", f"invented-{n}") for n in range(1000)}
    assert [t.name for t in found if t] == ["search"]  # by search's user rule, after payments' two
    assert len(calls) == 3, f"{len(calls)} rule applications for 1000 client ids of one user"
    assert tenants.tenant_of("svc-x", "pay-1").name == "payments"  # an earlier tenant's prefix still wins


def _engine(quotas: dict | None = None, *tenants: Tenant) -> QuotaEngine:
    return QuotaEngine(QuotaTable(quotas or {}, tenants=Tenants(tenants)), WINDOWS)


def test_a_tenants_quota_is_one_bucket_its_members_share_and_others_do_not_touch() -> None:
    engine = _engine(None, Tenant("team", users=("a", "b", "c"), quotas={PRODUCE: 3000}))
    # three members, 1500 bytes each: 4500 against a burst of 3000 -> 1500 in debt, 0.5 s at 3000/s
    throttles = [engine.charge(user, "p", PRODUCE, 1500, now=0.0) for user in ("a", "b", "c")]
    assert throttles == [0, 0, 500]
    assert engine.throttle_ms("a", "other-client", PRODUCE, now=0.0) == 500  # every member is held
    assert engine.charge("d", "p", PRODUCE, 10_000, now=0.0) == 0  # outside the tenant: unlimited
    assert engine.throttle_ms("a", "p", PRODUCE, now=0.5) == 0  # paid off at the tenant's rate


def test_a_member_is_held_by_whichever_of_its_own_quota_and_its_tenants_binds_first() -> None:
    engine = _engine(
        {QuotaEntity("a", None): {PRODUCE: 1000}},
        Tenant("team", users=("a", "b"), quotas={PRODUCE: 4000}),
    )
    # a's own quota (1000/s) binds first: 2000 bytes -> 1000 in debt, 1 s; the tenant is 2000 below its burst
    assert engine.charge("a", "p", PRODUCE, 2000, now=0.0) == 1000
    # b has no quota of its own: only the tenant's, where a's bytes count too (4000 - 2000 - 3000 = -1000)
    assert engine.charge("b", "p", PRODUCE, 3000, now=0.0) == 250
    # now the tenant binds a as well (after 0.9 s a's own debt is 100 bytes, 0.1 s; the tenant's 0.025 s ...)
    assert engine.charge("a", "p", PRODUCE, 0, now=0.1) == 900
    assert engine.throttle_ms("a", "p", PRODUCE, now=0.95) == 50  # own: -1000 + 950 = -50 -> 50 ms; tenant full
    assert [r.level_name for r in engine.resolutions("a", "p", PRODUCE)] == ["3", "tenant"]


def test_entity_buckets_of_a_member_charge_both_and_cap_fetches_by_the_smaller_quota() -> None:
    engine = _engine(
        {QuotaEntity("a", None): {FETCH: 10_000}},
        Tenant("team", users=("a", "b"), quotas={FETCH: 2000, REQUEST: 10}),
    )
    buckets = engine.entity_buckets("a", "c", now=0.0)
    assert buckets.produce is None
    assert buckets.fetch.charge(3000, 0.0) == 500  # the tenant's 2000 binds: -1000 at 2000/s
    assert buckets.fetch.tokens < 0
    assert engine.entity_buckets("b", "c", now=0.0).fetch.throttle_ms(0.0) == 500  # b shares the tenant's debt
    assert buckets.request is engine.entity_buckets("b", "c", now=0.0).request  # a tenant-only key: its bucket
    assert buckets.fetch_max_bytes == WINDOWS.fetch_max_bytes(2000)


def test_a_members_bucket_is_compiled_with_the_token_bucket_unless_told_not_to() -> None:
    """A member's charge is a C call as an entity's is (token_bucket.py's one source, both builds)."""
    build = "quotagate.quotas.token_bucket_c" if compiled.COMPILED else "quotagate.quotas.token_bucket"
    assert MemberBucket.__module__ == TokenBucket.__module__ == build


@pytest.mark.parametrize("name", BUCKET_BUILDS)
def test_a_members_charge_and_throttle_are_the_larger_of_its_own_and_its_tenants_in_either_build(name: str) -> None:
    buckets = importlib.import_module(name)
    own, tenant = buckets.TokenBucket.full(1000, 1000, 0.0), buckets.TokenBucket.full(4000, 2000, 0.0)
    member = buckets.MemberBucket(own, tenant)
    assert buckets.bucket_charge(member, 1500, 0.0) == 500  # own: -500 at 1000/s; the tenant 500 above 0
    assert buckets.bucket_charge(member, 1500, 0.0) == 2000  # own -2000 (2 s), the tenant -1000 (0.25 s)
    assert (own.tokens, tenant.tokens, member.tokens) == (-2000, -1000, -2000)
    assert buckets.bucket_throttle_ms(member, 0.25) == 1750  # reads only: the tenant is back at 0 by then
    assert member.tokens_at(1.0) == -1000  # own -2000 + 1000; the tenant full (2000)
    member.give_back(500, 1.0)
    assert (own.tokens, tenant.tokens) == (-500, 2000)
    shadow = buckets.MemberBucket(
        buckets.TokenBucket.full(1000, 1000, 0.0), buckets.ShadowTokenBucket.full(100, 100, 0.0)
    )
    assert shadow.shadow and not member.shadow
    assert buckets.bucket_charge(shadow, 300, 0.0) == 0  # the shadow tenant never holds
    assert shadow.take_held_ms() == 2000  # 200 below zero at 100/s


@pytest.mark.parametrize("name", CHARGING_BUILDS)
def test_a_member_whose_buckets_are_shared_between_processes_is_charged_through_either_build(name: str) -> None:
    """Leased buckets (quotas shared through Redis, or 1/N of them without it) are Python objects: the
    compiled member charges them through their Python methods."""
    charging = importlib.import_module(name)
    shared = SharedQuotas(ClusterConfig(processes=3), 3, ProxyMetrics(CollectorRegistry()), lambda: 0.0)
    table = QuotaTable(
        {QuotaEntity("a", None): {PRODUCE: 3000}}, tenants=Tenants((Tenant("t", users=("a",), quotas={PRODUCE: 6000}),))
    )
    buckets = QuotaEngine(table, WINDOWS, shared.bucket).entity_buckets("a", "c", now=0.0)
    assert isinstance(buckets.produce, MemberBucket)
    # this process's third: own 1000/s (burst 1000), the tenant's 2000/s (burst 2000)
    assert charging.charge_request(buckets, policy(0), 1500, 0.0) == 500  # own -500
    assert charging.charge_request(buckets, policy(0), 1500, 0.0) == 2000  # own -2000, the tenant -1000 (0.5 s)
    assert charging.charge_response(buckets, policy(0), 0, None, 0.5) == 1500


def test_a_strict_mutation_is_refused_while_the_tenant_is_in_debt_and_refunds_reach_both() -> None:
    engine = _engine(None, Tenant("team", users=("a", "b"), quotas={MUTATION: 10}))
    assert engine.admit("a", "c", MUTATION, [30], strict=True, now=0.0) == [True]  # 10 - 30 = -20
    assert engine.admit("b", "c", MUTATION, [1, 1], strict=True, now=0.0) == [False, False]
    assert engine.throttle_ms("b", "c", MUTATION, now=0.0) == 2000
    engine.refund("a", "c", MUTATION, 25, now=0.0)  # the broker rejected most of it
    assert engine.admit("b", "c", MUTATION, [1], strict=True, now=0.0) == [True]


def test_a_shadow_tenant_is_charged_and_reported_but_never_holds_a_member() -> None:
    engine = _engine(None, Tenant("team", users=("a",), quotas={PRODUCE: 1000}, shadow=True))
    buckets = engine.entity_buckets("a", "c", now=0.0)
    assert buckets.shadow
    assert buckets.produce.charge(3000, 0.0) == 0
    assert engine.would_throttle_ms("a", "c", PRODUCE, now=0.0) == 2000


def test_a_reload_keeps_a_tenants_debt_and_moves_a_member_that_changes_tenant() -> None:
    team = Tenant("team", users=("a", "b"), quotas={PRODUCE: 1000})
    engine = _engine(None, team)
    engine.charge("a", "c", PRODUCE, 3000, now=0.0)  # -2000
    bigger = Tenant("team", users=("a",), quotas={PRODUCE: 2000})
    other = Tenant("other", users=("b",), quotas={PRODUCE: 1000})
    engine.update(QuotaTable(tenants=Tenants((bigger, other))), WINDOWS, now=0.0)
    assert engine.throttle_ms("a", "c", PRODUCE, now=0.0) == 1000  # -2000 at the new 2000/s
    assert engine.throttle_ms("b", "c", PRODUCE, now=0.0) == 0  # b's new tenant owes nothing
    engine.update(QuotaTable(), WINDOWS, now=0.0)
    assert engine.buckets == {}  # no tenant quota: its bucket goes


def test_a_tenants_bucket_level_is_saved_and_restored_as_any_other(tmp_path: Path) -> None:
    team = Tenant("team", users=("a",), quotas={PRODUCE: 1000})
    engine = _engine(None, team)
    engine.charge("a", "c", PRODUCE, 3000, now=0.0)
    save_levels(tmp_path / "q.buckets.json", engine.levels(now=0.0), saved_at=0.0)  # the state file's
    levels, _ = load_levels(tmp_path / "q.buckets.json")
    assert levels == {("producer_byte_rate", "tenant", None, "team"): -2000.0}
    restarted = _engine(None, team)
    assert restarted.restore(levels, elapsed=0.5, now=100.0) == 1
    assert restarted.throttle_ms("a", "c", PRODUCE, now=100.0) == 1500
    assert math.isclose(restarted.buckets[("producer_byte_rate", "tenant", None, "team")].tokens, -1500)


def test_usage_rows_carry_the_tenant_its_quotas_and_whether_they_were_shadow_in_both_versions() -> None:
    team = Tenant("team", users=("alice",), quotas={PRODUCE: 3000, REQUEST: 20})
    trial = Tenant("trial", users=("carol",), quotas={PRODUCE: 500}, shadow=True)
    tenants = Tenants((team, trial))
    quotas = QuotasInForce(QuotaTable({QuotaEntity("alice", None): {PRODUCE: 1000}}, tenants=tenants))
    aggregates = AggregateCollector(limit=100, interval_ms=1000)
    requests = RequestCollector(100)
    for collector in (aggregates, requests):
        collector.add(record(5_010))  # alice, a produce
        collector.add(UsageRecord(5_020, "bob", "c", 0, 9, ("orders",), 10, 60, 0, 1.0, 0, "ok"))
        collector.add(UsageRecord(5_030, "carol", "c", 0, 9, ("orders",), 10, 60, 0, 1.0, 0, "ok"))
    for batch in (flushed(aggregates, quotas)[1], flushed(requests, quotas)[1]):
        alice, bob, carol = sorted(batch.rows(), key=lambda row: row["user"])
        assert {k: alice[k] for k in alice if k.startswith("tenant")} == {
            "tenant": "team",
            "tenant_quota_producer_byte_rate": 3000,
            "tenant_quota_producer_byte_rate_shadow": False,
            "tenant_quota_consumer_byte_rate": None,  # not charged by a produce
            "tenant_quota_consumer_byte_rate_shadow": None,
            "tenant_quota_request_percentage": 20,
            "tenant_quota_request_percentage_shadow": False,
            "tenant_quota_controller_mutation_rate": None,
            "tenant_quota_controller_mutation_rate_shadow": None,
        }
        assert alice["quota_producer_byte_rate"] == 1000  # its own, beside the tenant's
        assert {k: carol[k] for k in carol if k.startswith("tenant")} == {
            "tenant": "trial",
            "tenant_quota_producer_byte_rate": 500,
            "tenant_quota_producer_byte_rate_shadow": True,  # its entry is shadow
            "tenant_quota_consumer_byte_rate": None,
            "tenant_quota_consumer_byte_rate_shadow": None,
            "tenant_quota_request_percentage": None,  # charged, and the tenant has no quota for it
            "tenant_quota_request_percentage_shadow": False,
            "tenant_quota_controller_mutation_rate": None,
            "tenant_quota_controller_mutation_rate_shadow": None,
        }
        keys = (PRODUCE, FETCH, REQUEST, MUTATION)
        assert {k: bob[k] for k in bob if k.startswith("tenant")} == dict.fromkeys(
            ("tenant", *(f"tenant_quota_{key}{shadow}" for key in keys for shadow in ("", "_shadow")))
        )
        lines = [json.loads(line) for line in batch.json_lines()]
        assert sorted(lines, key=lambda row: row["user"]) == [alice, bob, carol]


def test_explain_says_which_tenant_a_client_is_in_and_how_its_quota_composes_with_the_clients_own() -> None:
    config = parse_config(BASE + '[[quotas]]\nuser = "svc-payments-7"\nproducer_byte_rate = 1000\n' + TENANTS)
    engine = QuotaEngine(config.quotas, WINDOWS)
    engine.charge("alice", "x", PRODUCE, 4500, now=0.0)  # the tenant: 3000 - 4500 = -1500, 500 ms
    answer = explain(engine, "svc-payments-7", "indexer", now=0.0)
    assert answer["tenant"] == {
        "name": "payments",
        "rule": "user_rule=RULE:^svc-payments-.*$/payments/",
        "lost": [
            {
                "name": "search",
                "rule": "user_rule=RULE:^svc-.*$/search/",  # its first rule that matches
                "why": "tenant 'payments' comes first in the file",
            }
        ],
    }
    produce = answer["quotas"]["producer_byte_rate"]
    assert (produce["applies"]["value"], produce["applies"]["level"]) == (1000, "3")
    assert produce["tenant"]["value"] == 3000 and produce["tenant"]["bucket"]["throttle_ms"] == 500
    assert produce["held_by"].endswith("now the quota of tenant 'payments'")
    fetch = answer["quotas"]["consumer_byte_rate"]
    assert fetch["applies"] is None and fetch["held_by"].startswith("the quota of tenant 'payments' alone")
    assert answer["quotas"]["request_percentage"]["tenant"] is None  # search's, but the client is in payments
    text = explain_text(answer)
    assert "tenant: 'payments' (by user_rule=RULE:^svc-payments-.*$/payments/)" in text
    assert "  and tenant 'payments': 3000, shared by every member of tenant 'payments'" in text
    assert "consumer_byte_rate: no quota of its own" in text
    assert explain(engine, "dave", "x", now=0.0)["tenant"] is None


@pytest.mark.parametrize("shadow", [False, True])
def test_explain_names_the_quota_holding_a_member_as_the_engine_applies_it(shadow: bool) -> None:
    """A shadow tenant in debt holds nobody: explain said "now the quota of tenant 'team'" while the
    engine throttled 0; and its bucket is this process's, not shared."""
    table = QuotaTable(
        {QuotaEntity("a", None): {PRODUCE: 10_000}},
        tenants=Tenants((Tenant("team", users=("a", "b"), quotas={PRODUCE: 1000}, shadow=shadow),)),
    )
    engine = QuotaEngine(table, WINDOWS)
    engine.charge("b", "c", PRODUCE, 4000, now=0.0)  # the tenant: 1000 - 4000 = -3000, 3 s
    explained = explain(engine, "a", "c", now=0.0)["quotas"]["producer_byte_rate"]
    assert engine.throttle_ms("a", "c", PRODUCE, now=0.0) == (0 if shadow else 3000)
    assert explained["held_by"].endswith("now the quota of tenant 'team'") != shadow, explained["held_by"]
    assert explained["tenant"]["shared_by"].endswith("(shadow: not shared)" if shadow else "and process")


def test_tenant_metrics_sum_the_members_and_stay_monotonic_when_idle_members_are_forgotten() -> None:
    engine = _engine(None, Tenant("team", users=("a", "b"), quotas={PRODUCE: 1000}), Tenant("idle", users=("z",)))
    metrics = EntityMetrics(lambda: engine, lambda: 10.0, max_entities=10)
    metrics.entity("a", "c1", 0.0).produce_bytes += 100
    metrics.entity("b", "c2", 5.0).produce_bytes += 50
    metrics.entity("d", "c1", 5.0).produce_bytes += 999  # in no tenant
    engine.charge("a", "c1", PRODUCE, 1500, now=10.0)
    assert {name: (stats.produce_bytes, members) for name, (stats, members) in metrics.tenant_sums().items()} == {
        "team": (150, 2),
        "idle": (0, 0),
    }
    assert metrics.expire_idle(now=4000.0, idle_seconds=3998.0) == 1  # a, unseen since 0
    assert metrics.tenant_sums()["team"][0].produce_bytes == 150  # its bytes stay in the tenant's sum
    samples = {
        (sample.name, tuple(sample.labels.values())): sample.value
        for family in metrics.collect()
        for sample in family.samples
        if "tenant" in sample.labels
    }
    assert samples[("quotagate_tenant_produce_bytes_total", ("team",))] == 150
    assert samples[("quotagate_tenant_members", ("team",))] == 1
    assert samples[("quotagate_tenant_quota_limit", ("team", "producer_byte_rate"))] == 1000
    assert samples[("quotagate_tenant_quota_tokens", ("team", "producer_byte_rate"))] == -500  # at now=10


def test_a_scrape_resolves_each_tracked_entitys_tenant_once_and_leaves_the_loops_cache_alone() -> None:
    """Scrapes and /quotas sum every tracked entity (10 000 by default, more than the 4 096 resolutions
    cached): through the loop's cache they emptied it twice a scrape and ran the rules again each time."""
    engine = _engine(None, Tenant("team", client_id_prefixes=("t-",)))
    metrics = EntityMetrics(lambda: engine, lambda: 1.0, max_entities=10)
    count = MAX_CACHED_CLIENTS + 1000
    for n in range(count):
        metrics.entity("u", f"t-{n}" if n % 2 else f"x-{n}", 1.0).produce_bytes += 1
    tenants = engine.table.tenants
    resolve, calls = tenants.resolve, []
    tenants.resolve = lambda *key: calls.append(key) or resolve(*key)
    for _ in range(4):
        assert metrics.tenant_sums()["team"][1] == count // 2
    assert len(calls) == count, f"{len(calls)} resolutions for {count} entities over 4 scrapes"
    assert tenants._cache == {}  # the loop's cache: untouched
    moved = Tenants((Tenant("team", client_id_prefixes=("t-",)), Tenant("x", client_id_prefixes=("x-",))))
    engine.update(QuotaTable(tenants=moved), WINDOWS, now=1.0)
    assert {name: members for name, (_, members) in metrics.tenant_sums().items()} == {
        "team": count // 2,
        "x": count // 2,
    }


def test_a_reload_that_changes_only_the_tenants_reports_that_key_and_applies_it_with_the_quotas() -> None:
    before = parse_config(BASE + TENANTS)
    after = parse_config(BASE + TENANTS.replace("producer_byte_rate = 3000", "producer_byte_rate = 6000"))
    assert reload_report(before, before, after).applied == ("tenants",)
    running = applied_config(before, after)
    assert dict(running.quotas.tenants.by_name["payments"].quotas)[PRODUCE] == 6000


def test_without_redis_each_of_n_processes_holds_a_share_of_the_tenants_quota() -> None:
    engines = [
        QuotaEngine(
            QuotaTable(tenants=Tenants((Tenant("team", users=("a", "b"), quotas={PRODUCE: 3000}),))),
            WINDOWS,
            SharedQuotas(ClusterConfig(processes=3), 3, ProxyMetrics(CollectorRegistry()), lambda: 0.0).bucket,
        )
        for _ in range(3)
    ]
    # Each process: a third of the rate and of the burst (1000), whichever member charges it.
    assert [engine.charge(user, "c", PRODUCE, 1500, now=0.0) for engine, user in zip(engines, "aba", strict=True)] == [
        500
    ] * 3


def test_a_members_session_is_muted_for_its_tenants_debt_that_another_member_ran_up(build: Build) -> None:
    # The tenant: 1000 B/s, burst 11 kB. alice's 20 kB produce leaves ~9 kB of debt, ~9 s, for bob too.
    services = services_for('[[tenants]]\nname = "team"\nusers = ["alice", "bob"]\nproducer_byte_rate = 1000\n')
    sessions = {}
    for user in ("alice", "bob", "dave"):
        sessions[user] = build.session(services)
        sessions[user].user = user  # as the SASL exchange would have set it
        sessions[user].broker_connected(0.0)
    sessions["alice"].client_data(produce(1, {"t": b"r" * 20_000}), now=10.0)
    assert 18.5 < sessions["alice"].muted_until < 19.5, sessions["alice"].muted_until
    sessions["bob"].client_data(produce(1, {"t": b"r" * 10}), now=10.0)
    assert 18.5 < sessions["bob"].muted_until < 19.5, "bob shares the tenant's bucket"
    sessions["dave"].client_data(produce(1, {"t": b"r" * 20_000}), now=10.0)
    assert sessions["dave"].muted_until <= 10.0, "dave is in no tenant and has no quota"
    sessions["bob"].broker_data(produce_answer(1, ["t"]), now=12.0)
    (answer,) = frames(taken(sessions["bob"].to_client))
    assert 6500 < unpack_from(">i", answer, len(answer) - 4)[0] < 7500  # the tenant's throttle as it stands


def test_what_a_shadow_tenant_would_have_held_a_member_is_reported_beside_its_own_binding_quota() -> None:
    engine = _engine(
        {QuotaEntity("a", None): {PRODUCE: 10_000}}, Tenant("team", users=("a",), quotas={PRODUCE: 1000}, shadow=True)
    )
    buckets = engine.entity_buckets("a", "c", now=0.0)
    assert buckets.shadow
    assert charge_request(buckets, policy(0), 3000, now=0.0) == 0  # its own 10 000 holds; the tenant's never
    assert shadow_throttle_ms(buckets, policy(0), False, now=0.0) == 2000  # 2000 bytes over 1000/s
    assert shadow_throttle_ms(buckets, policy(0), False, now=0.0) == 0  # reported once
