"""The ip entity and connection_creation_rate (KIP-612): per address, the <default> ip, overrides;
a connection over the rate is not counted and is closed after its throttle; the file, the state file,
reloads and explain (AlterClientQuotas and DescribeClientQuotas: test_quota_admin.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quotagate.config import parse_config
from quotagate.config.quota_state import load_state, save_state
from quotagate.config.reference import toml_data
from quotagate.config.settings import ConfigError
from quotagate.quotas import DEFAULT, QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.entities import IpQuotaKey
from quotagate.quotas.explain import explain

RATE = IpQuotaKey.CONNECTION_CREATION_RATE
BASE = '[proxy]\nbootstrap_servers = ["k:9092"]\n'


def ip_table(**rates: float) -> QuotaTable:
    return QuotaTable({QuotaEntity(ip=DEFAULT if name == "default" else name): {RATE: r} for name, r in rates.items()})


def test_an_address_is_held_to_its_rate_with_a_burst_of_one_window_and_refused_connections_are_not_counted() -> None:
    engine = QuotaEngine(QuotaTable({QuotaEntity(ip="10.0.0.1"): {RATE: 2}}), QuotaWindows(quota_window_num=2))
    assert [engine.admit_connection("10.0.0.1", 0.0) for _ in range(4)] == [0.0] * 4  # burst: 2/s x 2 windows
    assert engine.admit_connection("10.0.0.1", 0.0) == 0.5  # closed after 1/rate: when one more is allowed
    assert engine.admit_connection("10.0.0.1", 0.0) == 0.5  # the refused one was not counted (Kafka un-records it)
    assert engine.admit_connection("10.0.0.1", 0.5) == 0.0
    assert engine.admit_connection("10.0.0.2", 0.5) == 0.0  # no entry, no <default>: unlimited


def test_the_throttle_is_capped_at_one_quota_window() -> None:
    engine = QuotaEngine(
        ip_table(default=0.001 * 1000), QuotaWindows(quota_window_num=1, quota_window_size_seconds=0.2)
    )
    assert engine.admit_connection("10.0.0.1", 0.0) == 0.0  # a burst of 0.2 connections is taken as 1
    assert engine.admit_connection("10.0.0.1", 0.0) == 0.2  # 1 s to the next, capped at the 0.2 s window


def test_an_address_override_wins_over_the_default_ip_and_each_address_has_its_own_bucket() -> None:
    table = ip_table(default=1, **{"10.0.0.1": 100})
    assert table.resolve_ip("10.0.0.1").level == 1 and table.resolve_ip("10.0.0.1").value == 100
    assert table.resolve_ip("10.0.0.9").level == 2 and table.resolve_ip("10.0.0.9").value == 1
    assert table.resolve_ip("::ffff:10.0.0.1").value == 100  # a dual-stack listener's view of an IPv4 client
    engine = QuotaEngine(table, QuotaWindows(quota_window_num=1))
    assert engine.admit_connection("10.0.0.8", 0.0) == 0.0
    assert engine.admit_connection("10.0.0.8", 0.0) > 0
    assert engine.admit_connection("10.0.0.9", 0.0) == 0.0  # the <default> gives each address its own


def test_ip_quotas_cost_requests_nothing() -> None:
    engine = QuotaEngine(ip_table(default=5))
    assert not engine.limits_anyone  # the per-request path still skips every quota look-up
    assert engine.resolve("ANONYMOUS", "app", QuotaKey.PRODUCER_BYTE_RATE) is None


def test_a_reload_keeps_an_addresss_bucket_and_drops_it_with_the_entry() -> None:
    engine = QuotaEngine(ip_table(**{"10.0.0.1": 1}), QuotaWindows(quota_window_num=1))
    engine.admit_connection("10.0.0.1", 0.0)
    engine.update(ip_table(**{"10.0.0.1": 2}), engine.windows, 0.0)
    assert engine.buckets[(RATE, "ip", "10.0.0.1", None)].tokens == 0.0  # kept, not a fresh full bucket
    engine.update(QuotaTable(), engine.windows, 0.0)
    assert engine.buckets == {}


def test_the_file_takes_ip_entries_and_writes_them_back() -> None:
    config = parse_config(
        BASE + '[[quotas]]\nip = "<default>"\nconnection_creation_rate = 10\n'
        '[[quotas]]\nip = "0:0::1"\nconnection_creation_rate = 50\n'
    )
    assert config.quotas.ip_rates == {
        DEFAULT: (QuotaEntity(ip=DEFAULT), 10.0),
        "::1": (QuotaEntity(ip="::1"), 50.0),
    }
    assert toml_data(config.quotas) == [
        {"ip": "<default>", "connection_creation_rate": 10},
        {"ip": "::1", "connection_creation_rate": 50},
    ]


@pytest.mark.parametrize(
    ("entry", "key", "words"),
    [
        ('ip = "kafka-1"\nconnection_creation_rate = 1', "quotas[0].ip", "must be an IP address"),
        ('ip = "10.0.0.1"\nconnection_creation_rate = 1.5', "quotas[0].connection_creation_rate", "Integer value"),
        ('ip = "10.0.0.1"\nconnection_creation_rate = 0', "quotas[0].connection_creation_rate", "Integer value"),
        ('ip = "10.0.0.1"\nconnection_creation_rate = nan', "quotas[0].connection_creation_rate", "finite"),
        ('ip = "10.0.0.1"\nconnection_creation_rate = 3000000000', "quotas[0].connection_creation_rate", "2147483647"),
        ('ip = "10.0.0.1"\nproducer_byte_rate = 1', "quotas[0].producer_byte_rate", "cannot be given with ip"),
        ('ip = "10.0.0.1"\nuser = "a"\nconnection_creation_rate = 1', "quotas[0].user", "cannot be given with ip"),
        ('ip = "10.0.0.1"', "quotas[0]", "sets no quota"),
        ('user = "a"\nconnection_creation_rate = 1', "quotas[0].connection_creation_rate", "quota of the ip entity"),
    ],
)
def test_the_file_refuses_a_bad_ip_entry_naming_the_key(entry: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(BASE + f"[[quotas]]\n{entry}\n")
    assert error.value.key == key
    assert words in str(error.value)


def test_the_state_file_keeps_ip_entities(tmp_path: Path) -> None:
    path = tmp_path / "quotas.json"
    quotas = {QuotaEntity(ip="::1"): {RATE: 3.0}, QuotaEntity(ip=DEFAULT): {RATE: None}}
    save_state(path, quotas)
    assert load_state(path) == quotas
    path.write_text(path.read_text().replace('"::1"', '"0:0::1"'))
    with pytest.raises(ConfigError, match="short form"):
        load_state(path)


def test_explain_names_the_ip_entry_that_applies_and_the_default_it_beat() -> None:
    engine = QuotaEngine(ip_table(default=1, **{"10.0.0.1": 100}))
    engine.admit_connection("10.0.0.1", 0.0)
    ip = explain(engine, "u", "c", 0.0, ip="10.0.0.1")["ip"]
    assert (ip["applies"]["matched"], ip["applies"]["level"], ip["applies"]["value"]) == ("ip=10.0.0.1", "ip", 100.0)
    assert ip["applies"]["bucket"]["tokens"] == 1099.0  # burst 100/s x 11 windows, one connection taken
    assert ip["lost"] == [{"matched": "ip=<default>", "value": 1.0, "why": "the address's own entry comes first"}]
    assert explain(QuotaEngine(), "u", "c", 0.0, ip="10.0.0.1")["ip"]["applies"] is None
