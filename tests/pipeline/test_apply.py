"""apply and promote on the proxy's quota file: text in, text out, checked by the proxy's parser."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from quotagate.config import parse_config
from quotagate.config.settings import ConfigError
from quotagate.pipeline.apply import apply_shadow, promote, shadow_recommendations, write_config
from quotagate.quotas import QuotaEntity, QuotaKey

CONFIG = """quota_window_num = 2
[[quotas]]
client_id = "pinned"
producer_byte_rate = 1000
[proxy]
bootstrap_servers = ["127.0.0.1:9092"]
"""


def recommendation(client_id: str, recommended: float, current: float = math.nan, shadow: object = None) -> dict:
    return {
        "user": "ANONYMOUS",
        "client_id": client_id,
        "quota_key": "producer_byte_rate",
        "recommended": recommended,
        "met": True,
        "current": current,
        "current_shadow": shadow,
    }


def test_apply_writes_shadow_entries_only_where_no_binding_quota_would_be_lifted_and_promote_binds_them() -> None:
    found = pd.DataFrame(
        [
            recommendation("free", 190_000),
            recommendation("limited", 600_000, current=500_000, shadow=False),  # set with kafka-configs.sh
            recommendation("pinned", 2000),  # the file has its own entry
            recommendation("tried", 80_000, current=70_000, shadow=True),  # a shadow quota tried before
        ]
    )
    tried, skipped = shadow_recommendations(found, CONFIG)
    assert sorted(tried["client_id"]) == ["free", "tried"]
    assert {s.client_id: s.why.split(";")[0] for s in skipped} == {
        "limited": "a binding quota 500000 is in force",
        "pinned": "the file gives this entity quotas of its own",
    }
    applied = apply_shadow(CONFIG, tried)
    quotas = parse_config(applied).quotas
    free = QuotaEntity(None, "free")
    assert dict(quotas.items())[free] == {QuotaKey.PRODUCER_BYTE_RATE: 190_000}
    assert free in quotas.shadow and QuotaEntity(None, "pinned") not in quotas.shadow
    # applied again: the block is replaced, not doubled
    again = apply_shadow(applied, tried.iloc[:1])
    assert again.count("# BEGIN quotagate pipeline apply") == 1 and 'client_id = "tried"' not in again
    promoted, count = promote(applied)
    assert count == 2 and not parse_config(promoted).quotas.shadow
    assert dict(parse_config(promoted).quotas.items())[free] == {QuotaKey.PRODUCER_BYTE_RATE: 190_000}


def test_a_file_the_proxy_would_refuse_is_never_written(tmp_path: Path) -> None:
    path = tmp_path / "quotagate.toml"
    path.write_text(CONFIG)
    broken = CONFIG + '[[quotas]]\nclient_id = "pinned"\nproducer_byte_rate = 5\n'
    with pytest.raises(ConfigError, match="already given quotas"):
        write_config(path, broken)
    assert path.read_text() == CONFIG
    with pytest.raises(ValueError, match="run `quotagate pipeline apply` first"):
        promote(CONFIG)


def test_the_reports_current_cell_says_shadow_where_it_came_from_and_what_it_was_before() -> None:
    from quotagate.pipeline.report import _at_current, _current

    changed = pd.Series(
        {
            "current": 500_000.0,
            "current_shadow": False,
            "current_source": "records",
            "quota_history": "[[1000, 300000.0, false], [9000, 500000.0, false]]",
        }
    )
    assert _current(changed) == "500,000; was 300,000"
    tried = pd.Series(
        {
            "current": 185_000.0,
            "current_shadow": True,
            "current_source": "records",
            "quota_history": "[[1000, null, false], [9000, 185000.0, true]]",
            "current_seconds_throttled": 19,
            "current_throttled_time_ms": 44_800.0,
            "current_shadow_seconds_throttled": 18,
            "current_shadow_held_ms": 45_100.0,
        }
    )
    assert _current(tried) == "185,000 (shadow); was unlimited"
    assert _at_current(tried) == ("19 s / observed 18 s", "44.8 s / observed 45.1 s")
    assert _current(pd.Series({"current": 1000.0, "current_source": "config"})) == "1,000 (from --config)"


def test_any_client_id_is_written_safely_to_the_toml_and_the_shell_commands() -> None:
    import shlex

    from quotagate.pipeline.recommend import to_kafka_configs, to_toml

    odd = "a\"b'c; rm -rf /"
    found = pd.DataFrame([recommendation(odd, 1000)])
    tried, _ = shadow_recommendations(found, CONFIG)
    quotas = parse_config(apply_shadow(CONFIG, tried)).quotas
    assert QuotaEntity(None, odd) in quotas.shadow
    assert 'client_id = "a\\"b\'c; rm -rf /"' in to_toml(found)
    (command,) = to_kafka_configs(found).splitlines()
    assert shlex.split(command)[-1] == odd, command


TENANTS = """
[[tenants]]
name = "payments"  # the payments team
users = ["svc-pay-1", "svc-pay-2"]

[[tenants]]
name = "search"
client_id_prefixes = ["search-"]
producer_byte_rate = 300000
"""


def tenant_recommendation(tenant: str, recommended: float, key: str = "producer_byte_rate") -> dict:
    return {
        "user": None,
        "client_id": None,
        "tenant": tenant,
        "quota_key": key,
        "recommended": recommended,
        "met": True,
    }


def test_a_tenants_quota_goes_into_its_own_entry_an_undeclared_one_is_refused_and_promote_binds_it() -> None:
    from quotagate.pipeline.apply import shadow_tenants, tenant_skips

    config = CONFIG + TENANTS
    found = pd.DataFrame(
        [
            {**recommendation("free", 190_000), "tenant": None},
            tenant_recommendation("payments", 360_000),
            tenant_recommendation("payments", 25.0, "request_percentage"),
            tenant_recommendation("search", 500_000),  # its entry holds a binding quota
            tenant_recommendation("billing", 80_000),  # no [[tenants]] entry of that name
        ]
    )
    skipped = {skip.client_id: str(skip) for skip in tenant_skips(config, found)}
    assert set(skipped) == {"search", "billing"}
    assert skipped["billing"].startswith('tenant "billing", producer_byte_rate: not declared in this file'), skipped
    assert "binding quotas in force" in skipped["search"]
    tried, _ = shadow_recommendations(found, config)
    assert list(tried["client_id"]) == ["free"], "tenant rows are not entities"
    applied = apply_shadow(config, found)
    parsed = parse_config(applied)
    payments, search = parsed.tenants.by_name["payments"], parsed.tenants.by_name["search"]
    assert payments.shadow and dict(payments.quotas) == {
        QuotaKey.PRODUCER_BYTE_RATE: 360_000,
        QuotaKey.REQUEST_PERCENTAGE: 25.0,
    }
    assert not search.shadow and dict(search.quotas) == {QuotaKey.PRODUCER_BYTE_RATE: 300_000}
    assert "billing" not in parsed.tenants.by_name and QuotaEntity(None, "free") in parsed.quotas.shadow
    assert 'name = "payments"  # the payments team\nusers = ["svc-pay-1", "svc-pay-2"]\n' in applied, "kept as written"
    assert shadow_tenants(applied) == ["payments"]
    # applied again: the entry's values replaced (apply made it shadow), the block still one
    again = apply_shadow(applied, found.iloc[[1]].assign(recommended=400_000.0))
    assert again.count("# BEGIN quotagate pipeline apply") == 1 and again.count('name = "payments"') == 1
    assert parse_config(again).tenants.by_name["payments"].quotas[QuotaKey.PRODUCER_BYTE_RATE] == 400_000
    assert shadow_tenants(again) == ["payments"], "a tenant apply made shadow stays named until promoted"
    promoted, count = promote(again)
    assert count == 1, "payments' entry (the block has no entity this time)"
    tenants = parse_config(promoted).tenants.by_name
    assert not tenants["payments"].shadow and tenants["payments"].quotas[QuotaKey.PRODUCER_BYTE_RATE] == 400_000
    assert dict(tenants["search"].quotas) == {QuotaKey.PRODUCER_BYTE_RATE: 300_000}
    assert shadow_tenants(promoted) == [] and promote(promoted)[0] == promoted
    # promoted, the tenant's quotas bind: another apply leaves them alone
    assert [s.client_id for s in tenant_skips(promoted, found.iloc[[1]])] == ["payments"]


def test_pipeline_apply_and_promote_say_what_they_did_with_each_tenant(tmp_path: Path, capsys) -> None:
    from quotagate.cli import main

    folder = tmp_path / "recommendations"
    folder.mkdir()
    rows = [{**recommendation("free", 190_000), "tenant": None}, tenant_recommendation("payments", 360_000)]
    rows.append(tenant_recommendation("billing", 80_000))
    pd.DataFrame(rows).to_parquet(folder / "recommendations.parquet")
    config = tmp_path / "quotagate.toml"
    config.write_text(CONFIG + TENANTS)
    assert main(["pipeline", "apply", "--recommendations", str(folder), "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    assert "applied as shadow quotas: 2 quotas of 1 entities and 1 tenants" in out, out
    assert 'not applied: tenant "billing", producer_byte_rate: not declared in this file' in err, err
    assert parse_config(config.read_text()).tenants.by_name["payments"].shadow
    assert main(["pipeline", "promote", "--config", str(config)]) == 0
    assert "promoted: 2 shadow entries" in capsys.readouterr().out
    assert not parse_config(config.read_text()).tenants.by_name["payments"].shadow


def test_a_shadow_tenant_quota_shows_as_shadow_from_the_records_and_from_its_entry_for_older_ones() -> None:
    from quotagate.pipeline.recommend import with_current
    from quotagate.pipeline.report import _at_current, _current

    row = {**tenant_recommendation("payments", 400_000), "current_quota": 360_000.0, "current_source": "records"}
    row |= {"current_shadow": True, "current_seconds_throttled": 12, "current_throttled_time_ms": 9_000.0}
    row |= {"current_shadow_seconds_throttled": 11, "current_shadow_amount_delayed": 360_000 * 9.4}
    (shown,) = with_current(pd.DataFrame([row]), None).to_dict("records")
    assert shown["current_shadow"] is True and shown["current"] == 360_000, "the records alone say it"
    assert _current(pd.Series(shown)) == "360,000 (shadow)"
    assert _at_current(pd.Series(shown)) == ("12 s / observed 11 s", "9.0 s / observed 9.4 s")
    # the records win over the file, as for an entity: binding when recorded, whatever the entry says now
    tried = parse_config(apply_shadow(CONFIG + TENANTS, pd.DataFrame([tenant_recommendation("payments", 360_000)])))
    binding = with_current(pd.DataFrame([row | {"current_shadow": False}]), tried.quotas)
    assert binding["current_shadow"].tolist() == [False]
    # records written before the flag (current_shadow null): the file's entry says, else binding
    older = pd.DataFrame([row | {"current_shadow": None}])
    assert with_current(older, tried.quotas)["current_shadow"].tolist() == [True]
    assert with_current(older, None)["current_shadow"].tolist() == [False], "without the file: binding"
