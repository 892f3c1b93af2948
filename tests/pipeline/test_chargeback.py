"""Chargeback: shares of the cluster that add up, costs that are the rates times the usage, a rates
file refused by the key it gets wrong, and the command and the report section that show them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import functions as F

from quotagate.cli import main
from quotagate.config.settings import ConfigError
from quotagate.pipeline.chargeback import MEASURES, chargeback, ordered
from quotagate.pipeline.rates import Rates, parse_rates
from quotagate.pipeline.report import NO_TENANT, render_report, report_data
from quotagate.pipeline.synthetic import START_MS, SyntheticEntity, synthetic_aggregates
from quotagate.pipeline.whatif import RESULT_SCHEMA

DAY_MS = 86_400_000
RATES = Rates("EUR", price_per_gb_in=50.0, price_per_gb_out=20.0, price_per_request_second=3.0)
RATES_TOML = 'currency = "EUR"\nprice_per_gb_in = 50\nprice_per_gb_out = 20.0\nprice_per_request_second = 3\n'
PRODUCER = SyntheticEntity("alice", "producer", 3_000, requests_per_second=3)
CONSUMER = SyntheticEntity("bob", "consumer", 1_000, requests_per_second=1, api_key=1)


def usage(spark, days: int = 2):  # type: ignore[no-untyped-def]
    """Two entities over `days` days of 4 seconds each; the consumer creates 5 partitions a second
    on the first day (synthetic records mutate none)."""
    frames = [synthetic_aggregates(spark, [PRODUCER, CONSUMER], 4, START_MS + day * DAY_MS) for day in range(days)]
    table = frames[0]
    for frame in frames[1:]:
        table = table.unionByName(frame)
    first_day = F.col("date") == "2026-01-01"
    mutated = F.when(first_day & (F.col("client_id") == "consumer"), 5).otherwise(0).cast("long")
    return table.withColumn("partitions_mutated", mutated)


def test_shares_add_up_to_one_per_measure_and_period_and_costs_are_the_rates_times_the_usage(spark) -> None:
    table = usage(spark)
    rows = ordered(chargeback(table, RATES, period="day").toPandas())
    days = sorted(rows["period_start"].astype(str).unique())
    assert days == ["2026-01-01", "2026-01-02"] and (rows["period_start"] == rows["period_end"]).all()
    for day, period in rows.groupby("period_start"):
        for name in MEASURES:
            shares = period[f"{name}_share"]
            if period[name].sum() == 0:  # no partition mutated on the second day: nothing to share
                assert shares.isna().all(), (day, name)
            else:
                assert shares.sum() == pytest.approx(1.0), (day, name, shares.tolist())
    producer = rows[(rows["client_id"] == "producer") & (rows["period_start"].astype(str) == "2026-01-01")].iloc[0]
    # 4 seconds of 3 requests: 12,000 B in, 60 B out per request, 2 ms each (synthetic.py)
    assert (producer["bytes_in"], producer["bytes_out"], producer["request_time_ms"]) == (12_000, 720, 24.0)
    assert producer["cost_bytes_in"] == pytest.approx(12_000 / 1e9 * 50)
    assert producer["cost_bytes_out"] == pytest.approx(720 / 1e9 * 20)
    assert producer["cost_request_time"] == pytest.approx(24 / 1000 * 3)
    assert producer["cost_total"] == pytest.approx(12_000 / 1e9 * 50 + 720 / 1e9 * 20 + 24 / 1000 * 3)
    consumer = rows[(rows["client_id"] == "consumer") & (rows["period_start"].astype(str) == "2026-01-01")].iloc[0]
    assert consumer["partitions_mutated_share"] == 1.0 and producer["partitions_mutated_share"] == 0.0
    assert (rows["currency"] == "EUR").all() and (rows["price_per_request_second"] == 3.0).all()
    assert rows["tenant"].isna().all(), "records without a tenant column: no tenant declared"

    # the tenant is a level of the roll-up as soon as the records carry one; one period for the whole span
    tenants = table.withColumn("tenant", F.when(F.col("user") == "alice", "payments"))
    whole = chargeback(tenants, None, period="all").toPandas()
    assert len(whole) == 2 and "cost_total" not in whole.columns
    assert dict(zip(whole["client_id"], whole["tenant"], strict=True)) == {"producer": "payments", "consumer": None}
    assert {str(d) for d in whole["period_start"]} == {"2026-01-01"} and {str(d) for d in whole["period_end"]} == {
        "2026-01-02"
    }
    assert whole["bytes_in_share"].sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (RATES_TOML.replace("= 50", "= nan"), "price_per_gb_in"),
        (RATES_TOML.replace("= 20.0", "= -1"), "price_per_gb_out"),
        (RATES_TOML.replace("= 3", "= inf"), "price_per_request_second"),
        (RATES_TOML.replace("= 3", '= "3"'), "price_per_request_second"),
        (RATES_TOML.replace('"EUR"', '""'), "currency"),
        (RATES_TOML.replace("price_per_gb_out = 20.0\n", ""), "price_per_gb_out"),
        (RATES_TOML + "price_per_gb_stored = 1\n", "price_per_gb_stored"),
    ],
)
def test_a_rate_that_is_not_a_finite_non_negative_number_is_refused_naming_its_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_rates(text)
    assert refused.value.key == key, str(refused.value)
    assert parse_rates(RATES_TOML) == RATES


def test_chargeback_command_writes_csv_and_parquet_with_period_and_rates_in_every_row(
    shared_session, tmp_path: Path, capsys
) -> None:
    table, out, rates = tmp_path / "table", tmp_path / "chargeback", tmp_path / "rates.toml"
    usage(shared_session).write.partitionBy("date").parquet(str(table))
    rates.write_text(RATES_TOML)
    command = ["pipeline", "chargeback", "--table", str(table), "--rates", str(rates), "--out", str(out)]
    assert main([*command, "--since", "2026-01-02"]) == 0, capsys.readouterr().err
    csv, parquet = pd.read_csv(out / "chargeback.csv"), pd.read_parquet(out / "chargeback.parquet")
    assert len(csv) == len(parquet) == 2, csv
    assert (csv["period_start"] == "2026-01-02").all() and (csv["period_end"] == "2026-01-31").all()
    assert (csv["currency"] == "EUR").all() and (csv["price_per_gb_in"] == 50.0).all()
    assert csv["bytes_out_share"].sum() == pytest.approx(1.0) and csv["cost_total"].tolist() == pytest.approx(
        parquet["cost_total"].tolist()
    )

    rates.write_text(RATES_TOML.replace("= 20.0", "= inf"))
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "price_per_gb_out" in err and "finite" in err, err


def test_the_report_has_a_chargeback_section_with_each_entity_share_and_cost(spark) -> None:
    # no what-if (the report's other tests replay): only what the chargeback section needs
    no_whatif = spark.createDataFrame([], RESULT_SCHEMA)
    no_recommendations = pd.DataFrame(columns=["user", "client_id", "quota_key"])
    table = usage(spark, days=1).cache()
    page = render_report(report_data(table, no_whatif, no_recommendations, rates=RATES))
    section = page.split("Chargeback: shares of the cluster")[1]
    assert "2026-01-01 to 2026-01-01 (UTC, both days included)" in section, section
    # producer: 12,000 of 12,400 bytes in (the consumer's 4 requests send 100 B each)
    assert f"<td>{NO_TENANT}</td><td>alice</td><td>producer</td><td>12,000 (96.8%)</td>" in section, section
    assert "<th>cost (EUR)</th>" in section and "<td>0.07</td>" in section, section
    table.unpersist()
