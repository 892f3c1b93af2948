"""Precedence tables for tests: Kafka's ClientQuotaManagerTest scenario, and Kafka's 8 levels with
the 3 client-id-prefix levels as one table of entries that all match the client (alice, "fleet-7"),
most specific first: drop the entries above a level and that level applies."""

from __future__ import annotations

from quotagate.quotas import DEFAULT, QuotaEntity

LADDER_USER, LADDER_CLIENT_ID = "alice", "fleet-7"


def prefix(name: str, user: str | None = None) -> QuotaEntity:
    """The entity for client ids starting with `name` (of `user`, if given)."""
    return QuotaEntity(user, None, name)


# (level as the docs write it, entity)
LADDER = [
    ("1", QuotaEntity("alice", "fleet-7")),
    ("1p", prefix("fleet-", "alice")),
    ("2", QuotaEntity("alice", DEFAULT)),
    ("3", QuotaEntity("alice", None)),
    ("4", QuotaEntity(DEFAULT, "fleet-7")),
    ("4p", prefix("fleet-", DEFAULT)),
    ("5", QuotaEntity(DEFAULT, DEFAULT)),
    ("6", QuotaEntity(DEFAULT, None)),
    ("7", QuotaEntity(None, "fleet-7")),
    ("7p", prefix("fleet-")),
    ("8", QuotaEntity(None, DEFAULT)),
]

# Kafka ClientQuotaManagerTest's precedence scenario: entity -> producer_byte_rate. Resolves
# userA/client1 -> 5000, userA/client2 -> 4000, userB/client2 -> 8000, userD/anything -> 3000.
KAFKA_PRECEDENCE_SCENARIO = {
    QuotaEntity(DEFAULT, None): 1000,
    QuotaEntity(None, DEFAULT): 2000,
    QuotaEntity(DEFAULT, DEFAULT): 3000,
    QuotaEntity("userA", None): 4000,
    QuotaEntity("userA", "client1"): 5000,
    QuotaEntity("userB", None): 6000,
    QuotaEntity("userB", "client1"): 7000,
    QuotaEntity("userB", DEFAULT): 8000,
    QuotaEntity(None, "client1"): 9000,
}
