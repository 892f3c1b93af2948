"""The what-if replay's series (quotagate.pipeline.whatif.series): one entity's records, as the
replay receives them from Spark (an Arrow table), merged into one entry per request or aggregate."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from quotagate.pipeline.whatif import series
from quotagate.quotas import QuotaKey


def records(**columns: list) -> pa.Table:
    return pa.table(columns)


def test_a_requests_topic_rows_merge_and_two_requests_in_the_same_ms_stay_apart() -> None:
    # request 7: a produce naming two topics (its count on the first row); request 8 in the same ms
    table = records(
        ts=[1000, 1000, 1000],
        interval_ms=[0, 0, 0],
        request=[7, 8, 7],
        requests=[1, 1, 0],
        bytes_in=[300, 50, 200],
        throttle_ms=[4, 0, 0],
        request_time_ms=[1.5, 2.0, 0.0],
        throttled_bytes=[None, None, None],
        first_ms=[None, None, None],
        last_ms=[None, None, None],
        charge_offset_ms=[None, None, None],
    )
    merged = series(table, QuotaKey.PRODUCER_BYTE_RATE)
    assert merged is not None
    assert sorted(zip(merged["n"].tolist(), merged["a"].tolist(), merged["t"].tolist(), strict=True)) == [
        (1.0, 50.0, 0.0),
        (1.0, 500.0, 4.0),
    ]
    assert np.isnan(merged["b"]).all() and np.isnan(merged["f"]).all(), "v1 records carry no timing"


def test_keys_pick_their_records_and_aggregate_rows_of_one_interval_sum() -> None:
    # a v2 interval's produce rows for two topics, its fetch row; and a mutation (CreateTopics)
    table = records(
        ts=[0, 0, 0, 2000],
        interval_ms=[1000, 1000, 1000, 1000],
        request=[0, 0, 0, 0],
        api_key=[0, 0, 1, 19],
        requests=[10, 0, 4, 1],
        bytes_in=[6000, 4000, 400, 90],
        bytes_out=[600, 0, 80_000, 40],
        partitions_mutated=[0, 0, 0, 6],
        throttle_ms=[0, 0, 0, 0],
        request_time_ms=[20.0, 0.0, 8.0, 3.0],
        throttled_bytes=[100, None, None, None],
        first_ms=[5, 7, 1, 2001],
        last_ms=[900, 950, 990, 2001],
        charge_offset_ms=[4000.0, None, 1500.0, 1.0],
    )
    produce = series(table, QuotaKey.PRODUCER_BYTE_RATE)
    assert produce is not None
    assert (produce["n"].tolist(), produce["a"].tolist(), produce["b"].tolist()) == ([10.0], [10_000.0], [100.0])
    assert (produce["f"].tolist(), produce["g"].tolist(), produce["o"].tolist()) == ([5.0], [950.0], [4000.0])
    fetch = series(table, QuotaKey.CONSUMER_BYTE_RATE)
    assert fetch is not None and fetch["a"].tolist() == [80_000.0]
    mutations = series(table, QuotaKey.CONTROLLER_MUTATION_RATE)
    assert mutations is not None and (mutations["ts"].tolist(), mutations["a"].tolist()) == ([2000.0], [6.0])
    no_fetches = records(**{name: column[3:] for name, column in table.to_pydict().items()})
    assert series(no_fetches, QuotaKey.CONSUMER_BYTE_RATE) is None


def test_candidates_from_a_table_go_to_the_tenant_they_name_and_a_users_to_its_entity_only() -> None:
    import pandas as pd

    from quotagate.pipeline.whatif import _candidates_for, _tenant_candidates_for

    table = pd.DataFrame(
        {
            "quota_key": ["producer_byte_rate"] * 4,
            "quota": [1000.0, 2000.0, 3000.0, 4000.0],
            "user": [None, "alice", None, None],
            "client_id": [None, None, None, None],
            "tenant": [None, None, "payments", "search"],
        }
    )
    assert _candidates_for(table, "alice", "c", "producer_byte_rate", 0.0) == [1000.0, 2000.0]
    assert _candidates_for(table, "bob", "c", "producer_byte_rate", 0.0) == [1000.0]
    assert _tenant_candidates_for(table, "payments", "producer_byte_rate", 0.0) == [1000.0, 3000.0]
    assert _tenant_candidates_for(None, "payments", "producer_byte_rate", 1000.0)[-1] == 2000.0, "the grid"
