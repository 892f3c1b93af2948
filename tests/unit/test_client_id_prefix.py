"""Client-id prefixes (Redpanda's `client-id-prefix` entity): where they stand in Kafka's precedence,
who shares their bucket, the file and the state file (AlterClientQuotas: test_quota_admin.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotagate.config import parse_config
from quotagate.config.quota_state import load_state, save_state
from quotagate.config.reference import toml_data
from quotagate.config.settings import ConfigError
from quotagate.quotas import DEFAULT, QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.entities import MAX_PREFIX_CHARS
from tests.support.quota_ladder import LADDER, prefix

PRODUCE = QuotaKey.PRODUCER_BYTE_RATE
FETCH = QuotaKey.CONSUMER_BYTE_RATE


@pytest.mark.parametrize("top", range(len(LADDER)))
def test_a_prefix_entry_stands_just_below_the_exact_client_id_entry_of_its_shape(top: int) -> None:
    table = QuotaTable({entity: {PRODUCE: 1000 + index} for index, (_, entity) in enumerate(LADDER) if index >= top})
    resolution = table.resolve("alice", "fleet-7", PRODUCE)
    assert resolution is not None
    assert (resolution.level_name, resolution.entity, resolution.value) == (LADDER[top][0], LADDER[top][1], 1000 + top)


def test_the_longest_prefix_that_sets_the_key_wins() -> None:
    table = QuotaTable(
        {
            prefix("fleet-"): {PRODUCE: 100, FETCH: 7},
            prefix("fleet-eu-"): {PRODUCE: 200},
            prefix("other-"): {PRODUCE: 1},
        }
    )
    assert table.resolve("bob", "fleet-eu-3", PRODUCE).entity == prefix("fleet-eu-")
    assert table.resolve("bob", "fleet-eu-3", FETCH).entity == prefix("fleet-")  # per key, as Kafka's levels
    assert table.resolve("bob", "fleet-us-1", PRODUCE).entity == prefix("fleet-")
    assert table.resolve("bob", "fleet", PRODUCE) is None  # shorter than every prefix


def test_a_prefix_bucket_is_shared_by_every_client_id_with_that_prefix_and_across_users() -> None:
    engine = QuotaEngine(QuotaTable({prefix("fleet-"): {PRODUCE: 100}}), QuotaWindows(quota_window_num=1))
    assert engine.charge("alice", "fleet-1", PRODUCE, 100, now=0.0) == 0
    assert engine.charge("bob", "fleet-2", PRODUCE, 100, now=0.0) == 1000  # one bucket: 100 over at 100/s
    assert engine.charge("bob", "elsewhere", PRODUCE, 10**6, now=0.0) == 0  # no prefix: unlimited


def test_a_user_prefix_bucket_is_one_per_user_and_prefix() -> None:
    engine = QuotaEngine(QuotaTable({prefix("fleet-", DEFAULT): {PRODUCE: 100}}), QuotaWindows(quota_window_num=1))
    assert engine.charge("alice", "fleet-1", PRODUCE, 100, now=0.0) == 0
    assert engine.charge("alice", "fleet-2", PRODUCE, 100, now=0.0) == 1000  # alice's fleet shares one
    assert engine.charge("bob", "fleet-1", PRODUCE, 100, now=0.0) == 0  # bob's is his own
    bucket_ids = {resolution.bucket_id for resolution in (engine.resolve("alice", "fleet-9", PRODUCE),)}
    assert bucket_ids == {(PRODUCE, "user+client-id-prefix", "alice", "fleet-")}


def test_a_reload_keeps_the_prefix_buckets_debt_and_drops_it_with_the_entry() -> None:
    engine = QuotaEngine(QuotaTable({prefix("fleet-"): {PRODUCE: 100}}), QuotaWindows(quota_window_num=1))
    engine.charge("alice", "fleet-1", PRODUCE, 300, now=0.0)  # 200 in debt
    # An exact entry named like the prefix does not end the prefix's bucket for the other ids.
    engine.update(
        QuotaTable({prefix("fleet-"): {PRODUCE: 200}, QuotaEntity(None, "fleet-"): {PRODUCE: 5}}), engine.windows, 0.0
    )
    assert engine.throttle_ms("bob", "fleet-2", PRODUCE, now=0.0) == 1000  # debt kept, paid at the new rate
    engine.update(QuotaTable({QuotaEntity(None, "fleet-"): {PRODUCE: 5}}), engine.windows, 0.0)
    assert engine.resolve("bob", "fleet-2", PRODUCE) is None
    assert not any(bucket_id[1] == "client-id-prefix" for bucket_id in engine.buckets)


def test_bucket_levels_of_a_prefix_are_restored() -> None:
    table = QuotaTable({prefix("fleet-", "alice"): {PRODUCE: 100}})
    engine = QuotaEngine(table, QuotaWindows(quota_window_num=1))
    engine.charge("alice", "fleet-1", PRODUCE, 300, now=0.0)
    later = QuotaEngine(table, QuotaWindows(quota_window_num=1))
    assert later.restore(engine.levels(0.0), elapsed=0.0, now=0.0) == 1
    assert later.throttle_ms("alice", "fleet-2", PRODUCE, now=0.0) == 2000


def test_with_no_prefix_configured_a_table_holds_no_prefix_index() -> None:
    # The cost of prefixes when none is configured: one falsy check per cache miss, nothing per request.
    table = QuotaTable({QuotaEntity("alice", None): {PRODUCE: 1}})
    assert table._prefixes == {}


def test_the_file_takes_client_id_prefix_and_check_config_writes_it_back() -> None:
    config = parse_config(
        '[proxy]\nbootstrap_servers = ["k:9092"]\n'
        '[[quotas]]\nclient_id_prefix = "fleet-"\nproducer_byte_rate = 1000\n'
        '[[quotas]]\nuser = "alice"\nclient_id_prefix = "fleet-"\nproducer_byte_rate = 2000\n'
    )
    assert dict(config.quotas.items()) == {
        prefix("fleet-"): {PRODUCE: 1000},
        prefix("fleet-", "alice"): {PRODUCE: 2000},
    }
    assert toml_data(config.quotas) == [
        {"producer_byte_rate": 1000, "client_id_prefix": "fleet-"},
        {"user": "alice", "producer_byte_rate": 2000, "client_id_prefix": "fleet-"},
    ]


@pytest.mark.parametrize(
    ("entry", "key", "words"),
    [
        ('client_id_prefix = ""', "quotas[0].client_id_prefix", "non-empty string"),
        ("client_id_prefix = 5", "quotas[0].client_id_prefix", "non-empty string"),
        ('client_id_prefix = "<default>"', "quotas[0].client_id_prefix", "no default entity"),
        ('client_id_prefix = "a"\nclient_id = "b"', "quotas[0].client_id_prefix", "cannot be given with client_id"),
        (f'client_id_prefix = "{"x" * (MAX_PREFIX_CHARS + 1)}"', "quotas[0].client_id_prefix", "at most 103"),
    ],
)
def test_the_file_refuses_a_bad_prefix_naming_the_key(entry: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(f'[proxy]\nbootstrap_servers = ["k:9092"]\n[[quotas]]\n{entry}\nproducer_byte_rate = 1\n')
    assert error.value.key == key
    assert words in str(error.value)


def test_the_state_file_keeps_prefix_entities_and_reads_files_without_them(tmp_path: Path) -> None:
    path = tmp_path / "quotas.json"
    quotas = {prefix("fleet-", "alice"): {PRODUCE: 10.0}, QuotaEntity("bob", None): {PRODUCE: None}}
    save_state(path, quotas)
    assert load_state(path) == quotas
    assert "client_id_prefix" not in json.loads(path.read_text())["quotas"][1]
    path.write_text(json.dumps({"version": 1, "quotas": [{"user": None, "client_id": "a", "client_id_prefix": "b",
                                                          "values": {"producer_byte_rate": 1}}]}))  # fmt: skip
    with pytest.raises(ConfigError, match="client-id and client-id-prefix cannot be combined"):
        load_state(path)
