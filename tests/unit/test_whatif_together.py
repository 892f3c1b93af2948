"""The what-if replay of a tenant's members through their own quotas and the tenant's together
(quotagate.pipeline.whatif.replay_tenant): each member's charges go to the MemberBucket the proxy
charges (its own bucket and the tenant's), in one time order. Arrow tables as Spark hands them over."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from quotagate.pipeline.whatif import (
    by_member,
    replay_engine,
    replay_entity,
    replay_tenant,
    throttles,
    together,
    traffic,
)
from quotagate.quotas import QuotaKey, QuotaWindows
from quotagate.quotas.bucket import MemberBucket

WINDOWS = QuotaWindows(quota_window_num=2)  # 2 s bursts: held within seconds, not after 11
KEY = "producer_byte_rate"
TENANT = 200_000.0
OWN = 60_000.0  # member a's own quota, below its share of the tenant's
A, B = ("alice", "team-a"), ("bob", "team-b")
SECONDS = 20


def records(members: list[tuple[tuple[str, str], float, float | None]], tenant: float | None = TENANT) -> pa.Table:
    """Rows of replay_input(by_tenant=True): per member and second a v2 aggregate of 20 produces evenly
    over the second at `rate` bytes/s, naming its own quota (None: none) and the tenant's."""
    rows = []
    for (user, client_id), rate, own in members:
        for second in range(SECONDS):
            ts = 1_000_000 + second * 1000
            rows.append(
                {
                    "tenant": "team",
                    "user": user,
                    "client_id": client_id,
                    "ts": ts,
                    "interval_ms": 1000,
                    "requests": 20,
                    "throttle_ms": 0,
                    "first_ms": ts,
                    "last_ms": ts + 950,
                    "charge_offset_ms": float(sum(i * 50 for i in range(20))),
                    "request_time_ms": 40.0,
                    "throttled_bytes": 0,
                    "shadow_throttle_ms": 0,
                    "bytes_in": int(rate),
                    "quota_producer_byte_rate": 0.0 if own is None else own,  # quota_code: 0 unlimited
                    "tenant_quota_producer_byte_rate": 0.0 if tenant is None else tenant,
                    "request": 0,
                }
            )
    return pa.Table.from_pylist(rows)


TEAM = records([(A, 150_000.0, OWN), (B, 100_000.0, None)])
A_ALONE = records([(A, 150_000.0, OWN)])


def rows_of(table: pa.Table) -> list[dict]:
    return table.to_pylist()


def one(rows: list[dict], **match) -> dict:
    (found,) = [row for row in rows if all(row[name] == value for name, value in match.items())]
    return found


def test_a_member_is_held_by_its_own_quota_and_its_tenants_together() -> None:
    rows = rows_of(replay_tenant("team", 2, TEAM, None, WINDOWS, [KEY]))
    team = one(rows, tenant="team", is_current=True)
    a = one(rows, client_id="team-a", is_current=True)
    b = one(rows, client_id="team-b", is_current=True)
    assert (team["quota"], a["quota"], b["quota"]) == (TENANT, OWN, None), "b has no own quota: its row says so"
    assert a["tenant"] is None and a["user"] == "alice", "a member's rows are an entity's"
    # as the proxy held them: every byte a member sent over either quota is the tenant's too
    assert team["amount_delayed"] == pytest.approx(a["amount_delayed"] + b["amount_delayed"])
    assert b["seconds_throttled"] >= 8 and b["throttled_time_ms"] is None, "b is held by the tenant alone"

    alone = one(rows_of(replay_entity(*A, A_ALONE, None, WINDOWS, [KEY])), quota=OWN)
    assert a["amount_delayed"] >= alone["amount_delayed"] and a["seconds_throttled"] >= alone["seconds_throttled"]
    # a candidate own quota above a's rate: the tenant still holds it (alone, nothing would)
    high = max(row["quota"] or 0 for row in rows if row["client_id"] == "team-a")
    a_high = one(rows, client_id="team-a", quota=high)
    assert a_high["seconds_throttled"] >= 8 and a_high["amount_delayed"] > 0, a_high
    assert one(rows_of(replay_entity(*A, A_ALONE, None, WINDOWS, [KEY])), quota=high)["seconds_throttled"] == 0
    # a candidate tenant quota above the members' sum: a's own quota still holds a, as alone
    top = max(row["quota"] or 0 for row in rows if row["tenant"] == "team")
    team_top = one(rows, tenant="team", quota=top)
    assert team_top["amount_delayed"] == pytest.approx(alone["amount_delayed"])
    assert team_top["seconds_throttled"] == alone["seconds_throttled"] > 10
    # and at no quota on one side (quota null), what the other holds anyway: recommend's baseline
    without_tenant, without_own = one(rows, tenant="team", quota=None), one(rows, client_id="team-a", quota=None)
    assert not without_tenant["is_current"] and not without_own["is_current"]
    assert without_tenant["seconds_throttled"] == team_top["seconds_throttled"]
    assert without_own["seconds_throttled"] == a_high["seconds_throttled"]
    assert without_tenant["kafka_seconds_throttled"] is None and without_own["throttled_time_ms"] is None


def test_members_settled_elsewhere_get_no_rows_here_and_no_quotas_leave_the_tenant_alone() -> None:
    rows = rows_of(replay_tenant("team", 2, TEAM, None, WINDOWS, [KEY], settled=frozenset({B})))
    assert {row["client_id"] for row in rows} == {None, "team-b"}, "team-a's rows come from its entity replay"
    # the tenant's row still holds a to its own quota
    assert (
        one(rows, tenant="team", is_current=True)["amount_delayed"]
        > one(rows, client_id="team-b", quota=None)["amount_delayed"]
    )
    free = records([(A, 150_000.0, None), (B, 100_000.0, None)], tenant=None)
    rows = rows_of(replay_tenant("team", 2, free, None, WINDOWS, [KEY]))
    assert not [row for row in rows if row["quota"] is None], "no binding quota held anyone: no row at none"
    assert not [row for row in rows if row["is_current"]], "no quota in force"


def test_the_replay_asks_a_response_only_when_it_may_carry_a_throttle() -> None:
    # the responses' throttles equal asking every response, in time order, of the members' buckets
    parts = by_member(TEAM)
    assert [entity for entity, _ in parts] == [A, B]
    found = [traffic(part, QuotaKey.PRODUCER_BYTE_RATE) for _, part in parts]
    joint, member = together([t for t in found if t is not None], QuotaKey.PRODUCER_BYTE_RATE)
    charges = joint.charges
    key, entities = QuotaKey.PRODUCER_BYTE_RATE, [A, B]
    own = {A: (OWN, False), B: None}

    def engine():  # type: ignore[no-untyped-def]
        return replay_engine(key, WINDOWS, entities, own, ("team", TENANT, False))

    charged, responded = throttles(engine(), key, entities, member, charges)
    check = engine()
    buckets = [check.entity_buckets(*entity, float(charges["charge_at"][0])).produce for entity in entities]
    assert isinstance(buckets[0], MemberBucket)
    events = sorted(
        [(at, 0, i) for i, at in enumerate(charges["charge_at"])]
        + [(at, 1, i) for i, at in enumerate(charges["respond_at"])]
    )
    expected_charged, expected = np.zeros(len(member)), np.zeros(len(member))
    for at, is_response, i in events:
        bucket = buckets[member[i]]
        if is_response:
            expected[i] = bucket.throttle_ms(at)
        else:
            expected_charged[i] = bucket.charge(charges["amount"][i], at)
    assert (charged == expected_charged).all() and (responded == expected).all()
    assert (responded > 0).sum() > 20
