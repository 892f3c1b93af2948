"""A restart keeps what it should: the local buckets' levels (debts, spent bursts) are saved beside
the state file and put back at start, refilled for the time the proxy was down, so a client cannot
reset its quota by waiting for a deploy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotagate.config import parse_config
from quotagate.config.quota_state import levels_path, load_levels, save_levels
from quotagate.proxy.server import Proxy
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows

ALICE = QuotaEntity("alice", None)
RATE = 1000.0  # bytes/s; burst 11 000 with the default 11 windows of 1 s


def engine(rate: float = RATE) -> QuotaEngine:
    return QuotaEngine(QuotaTable({ALICE: {QuotaKey.PRODUCER_BYTE_RATE: rate}}), QuotaWindows())


def test_levels_are_the_buckets_that_are_not_full() -> None:
    before = engine()
    before.charge("alice", "app", QuotaKey.PRODUCER_BYTE_RATE, 15_000, now=100.0)  # 4 000 in debt
    before.charge("bob", "app", QuotaKey.PRODUCER_BYTE_RATE, 15_000, now=100.0)  # no quota: no bucket
    assert before.levels(100.0) == {("producer_byte_rate", "user", "alice", None): -4000.0}
    assert before.levels(115.0) == {}, "full again 15 s later: nothing to keep"


def test_a_debt_survives_a_restart_refilled_for_the_time_down() -> None:
    before = engine()
    throttle = before.charge("alice", "app", QuotaKey.PRODUCER_BYTE_RATE, 15_000, now=100.0)
    assert throttle == 4000
    levels = before.levels(100.0)
    after = engine()  # a new process: its loop clock starts elsewhere
    assert after.restore(levels, elapsed=1.5, now=7.0) == 1
    # 1.5 s down refilled 1 500 of the 4 000: the next request is throttled for the rest, as it
    # would have been without the restart.
    assert after.charge("alice", "other-app", QuotaKey.PRODUCER_BYTE_RATE, 0, now=7.0) == 2500
    fresh = engine()
    assert fresh.charge("alice", "other-app", QuotaKey.PRODUCER_BYTE_RATE, 0, now=7.0) == 0, "what restore prevents"


def test_restored_levels_follow_the_current_quotas() -> None:
    before = engine()
    before.charge("alice", "app", QuotaKey.PRODUCER_BYTE_RATE, 15_000, now=100.0)
    levels = before.levels(100.0)
    assert engine(rate=500.0).restore(levels, 0.0, 0.0) == 1, "a changed quota keeps the debt, as a reload does"
    no_quota = QuotaEngine(QuotaTable({QuotaEntity(None, "app"): {QuotaKey.PRODUCER_BYTE_RATE: RATE}}))
    assert no_quota.restore(levels, 0.0, 0.0) == 0, "alice's bucket is no quota's any more"
    assert engine().restore({("no_such_key", "user", "alice", None): -5.0}, 0.0, 0.0) == 0
    full = engine()
    full.restore({("producer_byte_rate", "user", "alice", None): 1e12}, 0.0, 0.0)
    assert full.levels(0.0) == {}, "never above the burst"


def test_levels_file_round_trips_and_a_bad_one_says_why(tmp_path: Path) -> None:
    path = levels_path(tmp_path / "quotas.json")
    assert path == tmp_path / "quotas.buckets.json"
    assert load_levels(path) == ({}, 0.0)
    save_levels(path, {("producer_byte_rate", "user", "alice", None): -4000.0}, saved_at=1_795_600_000.5)
    assert load_levels(path) == ({("producer_byte_rate", "user", "alice", None): -4000.0}, 1_795_600_000.5)
    for bad in ("{", '{"version": 2}', '{"version": 1, "saved_at": 1, "buckets": [{"id": [], "tokens": "NaN"}]}'):
        path.write_text(bad)
        with pytest.raises(ValueError):  # the proxy forgives it as a lost file (tests/unit/test_state_files.py)
            load_levels(path)


async def test_a_proxy_saves_levels_at_stop_and_the_next_one_restores_them(tmp_path: Path) -> None:
    config = parse_config(
        '[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\n[[quotas]]\nuser = "alice"\nproducer_byte_rate = 1000\n'
    )
    state = tmp_path / "quotas.json"
    first = Proxy(config, state_path=state)
    now = first.loop.time()
    first.engine.charge("alice", "app", QuotaKey.PRODUCER_BYTE_RATE, 61_000, now)  # 50 s of debt
    assert first.levels is not None
    first.levels.save()
    assert json.loads(levels_path(state).read_text())["buckets"][0]["tokens"] < -49_000
    second = Proxy(config, state_path=state)
    assert second.engine.throttle_ms("alice", "app", QuotaKey.PRODUCER_BYTE_RATE, second.loop.time()) > 49_000
    shared = parse_config('[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\nworkers = 2\n')
    assert Proxy(shared, state_path=state).levels is None, "shared buckets are kept by Redis, not here"
