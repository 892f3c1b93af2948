"""Tenants: [[tenants]] parsing, who is in which tenant, and how a tenant's bucket composes with a
member's own quota (quotas/tenants.py, quotas/engine.py)."""

import math

import pytest

from quotagate.config import ConfigError, parse_config
from quotagate.config.reference import effective_toml
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.entities import MAX_CACHED_CLIENTS
from quotagate.quotas.tenants import Tenant, Tenants

PRODUCE = QuotaKey.PRODUCER_BYTE_RATE
FETCH = QuotaKey.CONSUMER_BYTE_RATE
REQUEST = QuotaKey.REQUEST_PERCENTAGE
MUTATION = QuotaKey.CONTROLLER_MUTATION_RATE
BASE = '[proxy]\nbootstrap_servers = ["k:1"]\n'
WINDOWS = QuotaWindows(quota_window_num=1, controller_quota_window_num=1)  # burst = 1 s of quota

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
        ('name = "t"\nusers = ["a"]\nshadow = 1', "tenants[0].shadow", "true or false"),
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
        assert tenants.tenant_of("mallory", f"p-{n}" + "x" * 40_000) is not None
    assert len(tenants._cache) <= MAX_CACHED_CLIENTS
    assert max(len(client_id) for _, client_id in tenants._cache) <= 128


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


def test_a_tenants_bucket_level_is_saved_and_restored_as_any_other() -> None:
    team = Tenant("team", users=("a",), quotas={PRODUCE: 1000})
    engine = _engine(None, team)
    engine.charge("a", "c", PRODUCE, 3000, now=0.0)
    levels = engine.levels(now=0.0)
    assert levels == {("producer_byte_rate", "tenant", None, "team"): -2000.0}
    restarted = _engine(None, team)
    assert restarted.restore(levels, elapsed=0.5, now=100.0) == 1
    assert restarted.throttle_ms("a", "c", PRODUCE, now=100.0) == 1500
    assert math.isclose(restarted.buckets[("producer_byte_rate", "tenant", None, "team")].tokens, -1500)
