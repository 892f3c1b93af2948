"""The proxy's quota admin answers side by side with a real broker's (issue 37 item 5).

The same raw AlterClientQuotas and DescribeClientQuotas requests go to the test Kafka and to a proxy
in front of it that answers them from its own quotas; the answers are compared field by field:
throttle time, error codes and messages, entities (their components in order), values in order.
Where the proxy answers otherwise on purpose, the difference is listed once, in DIFFERENCES, with
why (docs/quotas.md says the same); every other answer must be the broker's.

Entity names are unique to the run, and nothing is set for a default entity on the broker (a
default user quota there would throttle the other tests): those are checked with validate_only.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.support.admin_quotas import alter_request, altered, ask, describe_request, described_quotas
from tests.support.kafka_helpers import wait_until

P = False  # an op that sets its key
R = True  # an op that removes it
EXACT, DEFAULT, ANY = 0, 1, 2

# Where the proxy answers otherwise on purpose, by case name: what it does and why.
DIFFERENCES = {
    "nan": "NaN is refused (INVALID_REQUEST, naming the key): Kafka stores it, a token bucket cannot hold it",
    "infinite double rate": "an infinite request_percentage is refused: Kafka stores it, a bucket needs a finite rate",
    "tiny double rate": "a request_percentage below 1e-06 is refused: its throttles would overflow a float",
    "ip host name": "an ip entity must be an address: the proxy matches clients by address, Kafka resolves names",
    "client-id-prefix": "client-id-prefix is an entity type of the proxy's (Redpanda's); Kafka does not know it",
    "producer_ids_rate": "producer_ids_rate (KIP-936) is a key of the proxy's; Kafka 4.2 does not know it",
}
# A described list of several entities comes in the order of the broker's map of every entity it
# holds, the proxy's of every entity the proxy holds: the same order when both hold the same ones.
# The broker here holds other tests' quotas too, so several entries are compared in any order.
ENTRY_ORDER = "the order of several described entries follows all the entities each side holds"


def cases(run: str) -> list[tuple[str, list]]:
    """(name, entries) of AlterClientQuotas checked with validate_only: nothing changes either side."""
    user = f"u-{run}"
    one = [("user", user)]
    return [
        ("user and client-id", [([("user", user), ("client-id", "c1")], [("producer_byte_rate", 1000.0, P)])]),
        (
            "client-id twice",
            [([("user", user), ("client-id", "a"), ("client-id", "b")], [("consumer_byte_rate", 2.0, P)])],
        ),
        ("defaults", [([("user", None), ("client-id", None)], [("request_percentage", 5.0, P)])]),
        ("zero", [(one, [("producer_byte_rate", 0.0, P)])]),
        ("negative", [(one, [("request_percentage", -5.0, P)])]),
        ("fractional", [(one, [("consumer_byte_rate", 1.5, P)])]),
        ("nearly whole", [(one, [("producer_byte_rate", 1.9999999, P)])]),
        ("too large for a long", [(one, [("producer_byte_rate", 1e19, P)])]),
        ("two bad keys", [(one, [("producer_byte_rate", -1.5, P), ("consumer_byte_rate", 2.5, P)])]),
        ("a key twice", [(one, [("producer_byte_rate", 1.0, P), ("producer_byte_rate", 2.0, P)])]),
        ("unknown key", [(one, [("bogus_rate", 1.0, P)])]),
        ("unknown key removed", [(one, [("bogus_rate", 0.0, R)])]),
        ("empty entity", [([], [("producer_byte_rate", 1.0, P)])]),
        ("empty user", [([("user", "")], [("producer_byte_rate", 1.0, P)])]),
        ("unknown entity type", [([("group", "g")], [("producer_byte_rate", 1.0, P)])]),
        ("ip with user", [([("ip", "10.0.0.1"), ("user", user)], [("connection_creation_rate", 1.0, P)])]),
        ("ip fractional", [([("ip", "10.0.0.1")], [("connection_creation_rate", 2.5, P)])]),
        ("ip too large for an int", [([("ip", "10.0.0.1")], [("connection_creation_rate", 3e9, P)])]),
        ("ip with a user key", [([("ip", "10.0.0.1")], [("producer_byte_rate", 1.0, P)])]),
        ("user with an ip key", [(one, [("connection_creation_rate", 1.0, P)])]),
        ("an entity twice", [(one, [("producer_byte_rate", 1.0, P)]), (one, [("consumer_byte_rate", 1.0, P)])]),
        (
            "several entities",
            [
                ([("user", f"{user}-1")], [("producer_byte_rate", 1.0, P)]),
                ([("user", f"{user}-2")], [("producer_byte_rate", 1.0, P), ("request_percentage", 3.0, P)]),
                ([("client-id", f"{user}-3")], [("producer_byte_rate", 1.0, P)]),
                ([("user", f"{user}-4"), ("client-id", "z")], [("producer_byte_rate", 1.0, P)]),
                ([("ip", None)], [("connection_creation_rate", 10.0, P)]),
            ],
        ),
        ("nan", [(one, [("producer_byte_rate", float("nan"), P)])]),
        ("infinite double rate", [(one, [("request_percentage", float("inf"), P)])]),
        ("tiny double rate", [(one, [("request_percentage", 1e-9, P)])]),
        ("ip host name", [([("ip", "localhost")], [("connection_creation_rate", 1.0, P)])]),
        ("client-id-prefix", [([("client-id-prefix", "fleet-")], [("producer_byte_rate", 1.0, P)])]),
        ("producer_ids_rate", [(one, [("producer_ids_rate", 1.0, P)])]),
    ]


BAD_FILTERS = [
    ("unknown match type", [("user", 5, None)]),
    ("exact without a name", [("user", EXACT, None)]),
    ("default with a name", [("user", DEFAULT, "x")]),
    ("any with a name", [("user", ANY, "x")]),
    ("a type twice", [("user", ANY, None), ("user", ANY, None)]),
    ("empty type", [("", ANY, None)]),
    ("unknown type", [("group", ANY, None)]),
    ("ip with user", [("ip", ANY, None), ("user", ANY, None)]),
]


@pytest.fixture
def quota_admin_proxy(proxy_factory, kafka):  # type: ignore[no-untyped-def]
    """A proxy answering the quota admin APIs from its own (empty) quotas; anyone may alter."""
    return proxy_factory(kafka.bootstrap, '[admin]\nalter_principals = ["User:ANONYMOUS"]\n')


def side_by_side(broker: str, proxy: str, request: bytes, decode, version: int) -> tuple:  # type: ignore[no-untyped-def]
    return decode(ask(broker, request), version), decode(ask(proxy, request), version)


def in_any_order(answer: tuple) -> tuple:
    """A described answer with its entries sorted (ENTRY_ORDER); components and values keep theirs."""
    throttle, code, message, entries = answer
    return throttle, code, message, None if entries is None else sorted(entries, key=repr)


@pytest.mark.parametrize("version", [0, 1])
def test_alter_client_quotas_is_answered_as_the_broker_answers_it(quota_admin_proxy, kafka, version: int) -> None:
    run = uuid.uuid4().hex[:8]
    mismatches = []
    for name, entries in cases(run):
        request = alter_request(entries, validate_only=True, version=version)
        from_broker, from_proxy = side_by_side(kafka.bootstrap, quota_admin_proxy.bootstrap, request, altered, version)
        print(f"{name}:\n  broker {from_broker}\n  proxy  {from_proxy}")
        if name in DIFFERENCES:
            assert from_broker != from_proxy, f"{name}: listed as a difference, but the answers agree"
        elif from_broker != from_proxy:
            mismatches.append((name, from_broker, from_proxy))
    assert not mismatches, "\n".join(f"{n}: broker {b} proxy {p}" for n, b, p in mismatches)


@pytest.mark.parametrize("version", [0, 1])
def test_quotas_set_through_both_are_described_as_the_broker_describes_them(
    quota_admin_proxy, kafka, version: int
) -> None:
    broker, proxy = kafka.bootstrap, quota_admin_proxy.bootstrap
    run = uuid.uuid4().hex[:8]
    user, other, twice = f"u-{run}", f"v-{run}", f"w-{run}"
    applied = [
        (
            [("user", user), ("client-id", "c1")],
            [("producer_byte_rate", 1000.0, P), ("request_percentage", 20.0, P), ("consumer_byte_rate", 5.0, P)],
        ),
        ([("user", other), ("client-id", "a"), ("client-id", "b")], [("consumer_byte_rate", 2000.0, P)]),
        ([("user", user)], [("producer_byte_rate", 3000.0, P), ("bogus_rate", 0.0, R)]),
        ([("client-id", f"c-{run}")], [("request_percentage", 7.5, P)]),
        ([("user", twice)], [("producer_byte_rate", 1.0, P)]),
        ([("user", twice)], [("consumer_byte_rate", 1.0, P)]),
    ]
    request = alter_request(applied, version=version)
    from_broker, from_proxy = side_by_side(broker, proxy, request, altered, version)
    print(f"applied:\n  broker {from_broker}\n  proxy  {from_proxy}")
    assert from_broker == from_proxy
    filters = [
        [("user", EXACT, user)],
        [("user", EXACT, user), ("client-id", EXACT, "c1")],
        [("user", EXACT, other), ("client-id", ANY, None)],
        [("client-id", EXACT, f"c-{run}")],
        [("user", EXACT, twice)],
        *[components for _, components in BAD_FILTERS],
    ]
    try:
        # The broker applies an alteration through its metadata log: wait until it describes it.
        wait_until(
            lambda: len(described_quotas(ask(broker, describe_request([("user", EXACT, user)])), 1)[3] or []) == 2,
            15,
            "the broker to describe what it was asked to set",
        )
        time.sleep(0.5)
        mismatches = []
        for strict in (False, True):
            for components in filters:
                request = describe_request(components, strict=strict, version=version)
                from_broker, from_proxy = side_by_side(broker, proxy, request, described_quotas, version)
                print(f"{components} strict={strict}:\n  broker {from_broker}\n  proxy  {from_proxy}")
                if in_any_order(from_broker) != in_any_order(from_proxy):
                    mismatches.append((components, strict, from_broker, from_proxy))
        assert not mismatches, "\n".join(f"{c} strict={s}: broker {b} proxy {p}" for c, s, b, p in mismatches)
    finally:
        removals = [
            (entity, [(key, 0.0, R) for key, _, _ in ops]) for entity, ops in applied if ops != [("bogus_rate", 0.0, R)]
        ]
        cleared = side_by_side(broker, proxy, alter_request(removals, version=version), altered, version)
        assert cleared[0] == cleared[1]
