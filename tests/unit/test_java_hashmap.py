"""The broker's order for quota entities, components and keys: java.util.HashMap's, computed."""

from __future__ import annotations

from quotagate.quotas import java_hashmap


def test_string_hash_is_javas() -> None:
    # "user".hashCode() and "client-id".hashCode() as a JVM prints them (the second is negative there).
    assert java_hashmap.string_hash("user") == 3599307
    assert java_hashmap.string_hash("client-id") == 2390829661
    assert java_hashmap.string_hash("") == 0
    assert java_hashmap.string_hash("é😀") == (233 * 31 * 31 + 0xD83D * 31 + 0xDE00) & 0xFFFFFFFF


def test_a_hashmap_grows_by_doubling_past_three_quarters() -> None:
    assert java_hashmap.capacity_after(0) == 16
    assert java_hashmap.capacity_after(12) == 16
    assert java_hashmap.capacity_after(13) == 32
    assert [java_hashmap.capacity_after(n, n) for n in (1, 2, 3, 4, 6, 7)] == [2, 4, 4, 8, 8, 16]
    assert java_hashmap.table_size_for(0) == 1 and java_hashmap.table_size_for(5) == 8


def test_keys_of_one_bucket_keep_the_order_they_were_put_in() -> None:
    # producer_byte_rate and request_percentage share a bucket of a 4-bucket table.
    keys = ["producer_byte_rate", "request_percentage", "consumer_byte_rate"]
    assert java_hashmap.hashmap_order(keys, initial=3) == [
        "consumer_byte_rate",
        "producer_byte_rate",
        "request_percentage",
    ]
    assert java_hashmap.hashmap_order(["client-id", "user"]) == ["client-id", "user"]
    assert java_hashmap.hashmap_order(["user", "client-id"]) == ["client-id", "user"]
