"""Tenants read as an attacker and a new operator would: ways a member could leave its tenant's quota,
rules that can never apply, and what explain says of a quota that holds no one."""

import pytest

from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.explain import explain, explain_text
from quotagate.quotas.tenants import Tenant, Tenants

PRODUCE = QuotaKey.PRODUCER_BYTE_RATE
BASE = '[proxy]\nbootstrap_servers = ["k:1"]\n'
WINDOWS = QuotaWindows(quota_window_num=1)  # burst = 1 s of quota


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
