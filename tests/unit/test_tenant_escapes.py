"""Tenants read as an attacker and a new operator would: ways a member could leave its tenant's quota,
rules that can never apply, and what explain says of a quota that holds no one."""

import pytest

from quotagate.config import ConfigError, parse_config
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.entities import MAX_PREFIX_CHARS, bounded_name
from quotagate.quotas.explain import explain, explain_text
from quotagate.quotas.tenants import Tenant, Tenants

PRODUCE = QuotaKey.PRODUCER_BYTE_RATE
BASE = '[proxy]\nbootstrap_servers = ["k:1"]\n'
WINDOWS = QuotaWindows(quota_window_num=1)  # burst = 1 s of quota


def test_an_authenticated_member_cannot_leave_its_tenant_by_sending_another_tenants_client_id() -> None:
    tenants = Tenants(
        (
            Tenant("consoles", client_id_prefixes=("console-",)),  # a label only: no quota
            Tenant("payments", users=("alice",), quotas={PRODUCE: 1000.0}),
        )
    )
    engine = QuotaEngine(QuotaTable({}, tenants=tenants), WINDOWS)
    assert engine.charge("alice", "app", PRODUCE, 3000, now=0.0) == 2000  # held by payments' 1000 B/s
    found = tenants.tenant_of("alice", "console-1")
    assert (found.name if found else None) == "payments"
    # the same bytes under a client id of her choosing: still payments' bucket, still held
    assert engine.charge("alice", "console-1", PRODUCE, 3000, now=0.0) == 5000
    membership = explain(engine, "alice", "console-1", now=0.0)["tenant"]
    assert (membership["name"], membership["rule"]) == ("payments", "user=alice")
    assert membership["lost"] == [
        {
            "name": "consoles",
            "rule": "client_id_prefix=console-",
            "why": "tenant 'payments' takes the client by its user, which comes before any client id",
        }
    ]
    found = tenants.tenant_of("bob", "console-1")  # in no tenant by user: the client id's
    assert (found.name if found else None) == "consoles"


def test_a_user_rule_matches_a_principal_longer_than_128_characters_on_its_whole_name() -> None:
    dn = (
        "CN=payments-api.prod.svc.cluster.local,OU=Platform Engineering,O=Acme Corporation International,"
        "L=San Francisco,ST=California,C=US,OU=Payments"
    )
    assert len(dn) > 128
    tenants = Tenants((Tenant("payments", user_rules=("RULE:^CN=[^,]+,.*,OU=Payments$/payments/",)),))
    assert [tenant.name for tenant, _ in tenants.matching(dn, "c")] == ["payments"]
    found = tenants.tenant_of(dn, "c")
    assert (found.name if found else None) == "payments"


def test_a_principal_over_128_characters_stays_in_its_tenants_sums_after_a_reload() -> None:
    """The metrics keep an entity under its names cut to 128 characters; after a reload a scrape
    resolves its tenant again, from its whole names (the rule below looks past the cut)."""
    dn = (
        "CN=payments-api.prod.svc.cluster.local,OU=Platform Engineering,O=Acme Corporation International,"
        "L=San Francisco,ST=California,C=US,OU=Payments"
    )
    rule = "RULE:^CN=[^,]+,.*,OU=Payments$/payments/"
    engine = QuotaEngine(QuotaTable({}, tenants=Tenants((Tenant("payments", user_rules=(rule,)),))), WINDOWS)
    metrics = EntityMetrics(lambda: engine, lambda: 1.0, max_entities=10)
    metrics.entity(dn, "app", 1.0).produce_bytes += 100
    assert metrics.tenant_sums()["payments"][1] == 1
    reloaded = Tenants((Tenant("payments", user_rules=(rule,), quotas={PRODUCE: 5000.0}),))
    engine.update(QuotaTable({}, tenants=reloaded), WINDOWS, now=1.0)
    sums = metrics.tenant_sums()["payments"]
    assert (sums[1], sums[0].produce_bytes) == (1, 100)
    assert metrics.expire_idle(now=10_000.0) == 1 and metrics.whole_names == {}


@pytest.mark.parametrize("tenant_first", [False, True])
def test_a_forged_bounded_client_id_does_not_take_a_long_client_id_out_of_its_prefix(tenant_first: bool) -> None:
    """A client id over 128 characters is kept as its bounded form, which a client can also send as a
    client id of its own: both must match the same prefixes, or the one resolved first answers (from
    the caches keyed by the bounded form) for the other."""
    prefix = "p" * MAX_PREFIX_CHARS
    long_id = prefix + "-worker-" + "x" * 100
    forged = bounded_name(long_id)
    assert len(forged) == 128 and forged != long_id
    table = QuotaTable(
        {QuotaEntity(None, None, prefix): {PRODUCE: 1000.0}},
        tenants=Tenants((Tenant("fleet", client_id_prefixes=(prefix,), quotas={PRODUCE: 4000.0}),)),
    )
    first, then = (forged, long_id) if tenant_first else (long_id, forged)
    for client_id in (first, then):
        found = table.tenants.tenant_of("mallory", client_id)
        assert (found.name if found else None) == "fleet", client_id
        resolution = table.resolve("mallory", client_id, PRODUCE)
        assert resolution is not None and resolution.entity.client_id_prefix == prefix, client_id


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ('[[quotas]]\nclient_id_prefix = "{p}"\nproducer_byte_rate = 1\n', "quotas[0].client_id_prefix"),
        ('[[tenants]]\nname = "t"\nclient_id_prefixes = ["{p}"]\n', "tenants[0].client_id_prefixes"),
    ],
)
def test_a_prefix_longer_than_a_bounded_client_id_keeps_is_refused_naming_the_key(entry: str, key: str) -> None:
    parse_config(BASE + entry.format(p="x" * MAX_PREFIX_CHARS))
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + entry.format(p="x" * (MAX_PREFIX_CHARS + 1)))
    assert (info.value.key, f"at most {MAX_PREFIX_CHARS} characters" in info.value.problem) == (key, True), (
        info.value.problem
    )


FIRST = '[[tenants]]\nname = "a"\nuser_rules = ["RULE:^svc-.*$/a/"]\nclient_id_prefixes = ["app-"]\n'


@pytest.mark.parametrize(
    ("second", "key", "rule"),
    [
        ('users = ["svc-x"]', "tenants[1].users", "user_rule=RULE:^svc-.*$/a/"),
        ('client_ids = ["app-web"]', "tenants[1].client_ids", "client_id_prefix=app-"),
        ('client_id_prefixes = ["app-batch-"]', "tenants[1].client_id_prefixes", "client_id_prefix=app-"),
    ],
)
def test_a_member_rule_an_earlier_tenant_takes_every_entity_of_is_refused_naming_the_key(
    second: str, key: str, rule: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + FIRST + '[[tenants]]\nname = "b"\n' + second + "\n")
    problem = info.value.problem
    assert (info.value.key, "tenant 'a', earlier in the file" in problem, rule in problem) == (key, True, True), problem


def test_member_rules_an_earlier_tenant_only_overlaps_are_accepted() -> None:
    second = '[[tenants]]\nname = "b"\nusers = ["svc"]\nclient_ids = ["app"]\nclient_id_prefixes = ["ap"]\n'
    tenants = parse_config(BASE + FIRST + second).tenants
    assert [t.name for t in tenants.tenants] == ["a", "b"]
    found = tenants.tenant_of("carol", "apx")
    assert (found.name if found else None) == "b"


@pytest.mark.parametrize(
    ("own_shadow", "tenant_shadow", "held_by"),
    [
        (None, True, "nothing: unlimited (the quota of tenant 'team': shadow, tried and never applied)"),
        (True, None, "nothing: unlimited (its own quota: shadow, tried and never applied)"),
        (True, True, "nothing: unlimited (its own quota and the quota of tenant 'team': shadow, tried and never"),
        (True, False, "the quota of tenant 'team' (its own quota: shadow, tried and never applied)"),
        (False, True, "its own quota (the quota of tenant 'team': shadow, tried and never applied)"),
        (None, False, "the quota of tenant 'team' alone (no entry of its own sets the key)"),
    ],
)
def test_explain_never_says_a_shadow_quota_holds_the_client(
    own_shadow: bool | None, tenant_shadow: bool | None, held_by: str
) -> None:
    own = QuotaEntity("a", None)
    quotas = {} if own_shadow is None else {own: {PRODUCE: 1000.0}}
    team = Tenant("team", users=("a",), quotas={PRODUCE: 1000.0}, shadow=bool(tenant_shadow))
    tenants = () if tenant_shadow is None else (team,)
    table = QuotaTable(quotas, frozenset({own}) if own_shadow else frozenset(), Tenants(tenants))
    engine = QuotaEngine(table, WINDOWS)
    throttle = engine.charge("a", "c", PRODUCE, 3000, now=0.0)  # 2 s over either quota
    assert throttle == (2000 if False in (own_shadow, tenant_shadow) else 0)
    answer = explain(engine, "a", "c", now=0.0)
    assert answer["quotas"]["producer_byte_rate"]["held_by"].startswith(held_by)
    if tenant_shadow is not None:
        assert f"held by: {held_by}" in explain_text(answer)


def test_a_tenants_producer_ids_rate_refuses_ids_new_to_it_while_in_debt_and_passes_ids_it_has_seen() -> None:
    """KIP-936 per bucket: an ID a bucket saw within its window costs it nothing, so a tenant in debt
    refuses a member's new ID, not one another member already used (docs/quotas.md, "Tenants")."""
    ids = QuotaKey.PRODUCER_IDS_RATE
    team = Tenant("team", users=("a", "b"), quotas={ids: 2.0})  # burst: 2 IDs
    engine = QuotaEngine(QuotaTable({QuotaEntity("b", None): {ids: 100.0}}, tenants=Tenants((team,))), WINDOWS)
    assert [engine.admit_producer_id("a", "c", pid, now=0.0) for pid in (1, 2, 3, 4)] == [0, 0, 0, 500]
    assert engine.admit_producer_id("b", "c", 9, now=0.0) == 500  # new to the tenant, in debt: refused
    assert engine.admit_producer_id("b", "c", 1, now=0.0) == 0  # the tenant saw 1 (a's); b's own is not in debt
    assert engine.admit_producer_id("a", "c", 4, now=0.5) == 0  # paid off at 2 IDs/s


def test_a_member_beyond_max_tracked_still_counts_in_its_tenants_sums_and_in_other() -> None:
    """A client inventing client ids fills the tracked entities; another tenant's new member is then
    counted without its name ("other"), but its tenant's sums (quotagate_tenant_*, top's tenant row)
    must not lose it: one tenant's names must not blind the operator to another's traffic."""
    team = Tenant("team", users=("a",), quotas={PRODUCE: 1000.0})
    engine = QuotaEngine(QuotaTable({}, tenants=Tenants((team,))), WINDOWS)
    metrics = EntityMetrics(lambda: engine, lambda: 1.0, max_entities=10)
    for i in range(metrics.max_tracked):
        metrics.entity("mallory", f"invented-{i}", 0.0).produce_bytes += 1
    metrics.entity("a", "new-deployment", 1.0).produce_bytes += 500  # not tracked: no room, none idle
    assert ("a", "new-deployment") not in metrics.stats
    total, members = metrics.tenant_sums()["team"]
    assert (total.produce_bytes, members) == (500, 0)
    _, other = metrics.ranked()
    assert other.produce_bytes == metrics.max_tracked - metrics.max_entities + 500
    # a reload that drops the tenant: its untracked bytes stay in "other" (monotonic), in no tenant's sums
    engine.update(QuotaTable({}), WINDOWS, now=2.0)
    metrics.expire_idle(2.0, idle_seconds=10.0)
    assert metrics.tenant_sums() == {}
    assert metrics.ranked()[1].produce_bytes == other.produce_bytes
