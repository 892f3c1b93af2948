"""The loop from what the proxy enforced to a recommendation and back, on a real proxy and broker.

1. A quota set with kafka-configs.sh at the proxy (the Admin API, no quota in any file) is what the
   pipeline reports as the entity's current quota, from the usage records alone (no --config).
2. recommend → `pipeline apply` (shadow quotas in the proxy's file, which it reloads) → live traffic
   → the next pipeline run: for a client that ignores throttling, the replay's prediction at the
   shadow quota and what the shadow quota observed appear side by side and agree.

Runs `quotagate pipeline` in this process on the test session's SparkSession (test_cli.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pandas as pd
from kafka import KafkaProducer

from quotagate.cli import main
from tests.support.admin_quotas import quotas_view
from tests.support.kafka_clients import Acked, kafka_python_producer_loop
from tests.support.kafka_helpers import create_topic, unique_topic, wait_until

LIMITED_QUOTA = 500_000  # bytes/s, set with kafka-configs.sh as the demo does
RECORD = 1000
FIRST_RATE = 150_000  # bytes/s of records from the free producer before the shadow quota
SECOND_RATE = 450_000  # after: three times that, well over the recommendation
AGREEMENT = 0.15  # predicted vs observed at the shadow quota


def paced_producer(bootstrap: str, topic: str, client_id: str, rate: float, seconds: float) -> None:
    """kafka-python (it ignores throttle_time_ms) sending `rate` bytes/s of records for `seconds`."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1, linger_ms=5)
    value = os.urandom(RECORD)
    sent, started = 0, time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        while sent < elapsed * rate / RECORD:
            producer.send(topic, value=value)
            sent += 1
        time.sleep(0.005)
    producer.close(timeout=30)


def configured(metrics_port: int, client_id: str) -> dict | None:
    return next((e for e in quotas_view(metrics_port)["configured"] if e["client_id"] == client_id), None)


def pipeline_all(usage: Path, work: Path, capsys) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    assert main(["pipeline", "all", "--input", str(usage), "--work", str(work), "--headroom", "0.5"]) == 0
    print(capsys.readouterr().out)
    return pd.read_parquet(work / "recommendations" / "recommendations.parquet")


def row_of(found: pd.DataFrame, client_id: str, key: str = "producer_byte_rate") -> pd.Series:
    rows = found[(found["client_id"] == client_id) & (found["quota_key"] == key)]
    assert len(rows) == 1, found[["client_id", "quota_key"]]
    return rows.iloc[0]


def test_admin_api_quota_is_reported_and_a_shadowed_recommendation_is_checked_on_live_traffic(
    shared_session,
    proxy_factory,
    kafka,
    kafka_tool,
    tmp_path: Path,
    capsys,
) -> None:
    usage = tmp_path / "usage"
    proxy = proxy_factory(
        kafka.bootstrap,
        # a 2 s burst: the pipeline, given no --config, must replay with the windows the records carry
        "quota_window_num = 2\n"
        f'[admin]\nalter_principals = ["ANONYMOUS"]\n'
        f'[usage]\nenabled = true\nflush_interval_seconds = 0.5\nmax_file_seconds = 1.0\ndirectory = "{usage}"\n',
    )
    topic = unique_topic("loop")
    create_topic(kafka.bootstrap, topic, partitions=1)
    limited = "--entity-type", "clients", "--entity-name", "loop-limited"
    kafka_tool("configs", "--bootstrap-server", proxy.bootstrap, "--alter", "--add-config",
               f"producer_byte_rate={LIMITED_QUOTA}", *limited)  # fmt: skip
    threads = [
        threading.Thread(target=kafka_python_producer_loop, args=(proxy.bootstrap, topic, "loop-limited", 12, Acked())),
        # long enough past the 2 s burst for the replay to see free's demand, not the burst
        threading.Thread(target=paced_producer, args=(proxy.bootstrap, topic, "loop-free", FIRST_RATE, 15)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    time.sleep(1.5)  # the recorder flushes every 0.5 s; the proxy keeps running for the loop

    # 1. The quota kafka-configs.sh set, from the records alone.
    first = pipeline_all(usage, tmp_path / "first", capsys)
    held = row_of(first, "loop-limited")
    assert (held["current"], held["current_source"], bool(held["current_shadow"])) == (LIMITED_QUOTA, "records", False)
    with capsys.disabled():  # the figure is for the log, not for the captured CLI output read below
        print(
            f"loop-limited at its current quota: held replay {held['current_throttled_time_ms'] / 1000:.1f} s, "
            f"recorded {held['current_recorded_held_ms'] / 1000:.1f} s; seconds throttled replay "
            f"{held['current_seconds_throttled']}, recorded {held['current_recorded_seconds_throttled']}"
        )
    assert held["current_recorded_seconds_throttled"] >= 5, "kafka-python ignoring throttles is held at 500 kB/s"
    # Replay against record for a client the proxy held is printed, not asserted: it rests on where, within
    # each second, the held client's requests fell, which an overloaded machine blurs (docs/pipeline.md:
    # 0.97x and 1.02x in two runs here, 0.40x in one at a load average of 6 whose client kept pausing).
    page = (tmp_path / "first" / "report.html").read_text()
    assert "<td>500,000</td>" in page and "unlimited</td><td>" in page, "limited's quota, and free's none"

    # 2. recommend → apply as shadow → live traffic → the next run.
    free = row_of(first, "loop-free")
    assert pd.isna(free["current"]) and free["current_source"] == "records", "free had no quota"
    recommended = float(free["recommended"])
    assert FIRST_RATE <= recommended <= 2 * FIRST_RATE, recommended
    args = ["pipeline", "apply", "--recommendations", str(tmp_path / "first" / "recommendations")]
    assert main([*args, "--config", str(proxy.config_path), "--quota-key", "producer_byte_rate"]) == 0
    assert 'client id "loop-limited", producer_byte_rate: a binding quota 500000 is in force' in capsys.readouterr().err
    wait_until(lambda: (configured(proxy.metrics_port, "loop-free") or {}).get("shadow"), 10, "the shadow quota")
    limited_entry = configured(proxy.metrics_port, "loop-limited")
    assert limited_entry and limited_entry["producer_byte_rate"] == LIMITED_QUOTA and not limited_entry["shadow"]

    paced_producer(proxy.bootstrap, topic, "loop-free", SECOND_RATE, 20)
    time.sleep(1.5)
    assert main(["pipeline", "promote", "--config", str(proxy.config_path)]) == 0
    wait_until(lambda: (configured(proxy.metrics_port, "loop-free") or {}).get("shadow") is False, 10, "promoted")
    proxy.stop()

    second = pipeline_all(usage, tmp_path / "second", capsys)
    tried = row_of(second, "loop-free")
    assert (tried["current"], tried["current_source"], bool(tried["current_shadow"])) == (recommended, "records", True)
    predicted_held, observed_held = tried["current_throttled_time_ms"] / 1000, tried["current_shadow_held_ms"] / 1000
    predicted_s, observed_s = tried["current_seconds_throttled"], tried["current_shadow_seconds_throttled"]
    print(
        f"shadow quota {recommended:.0f} B/s on live traffic: time held predicted {predicted_held:.1f} s, observed "
        f"{observed_held:.1f} s ({predicted_held / max(observed_held, 1e-9):.3f}x); seconds throttled predicted "
        f"{predicted_s}, observed {observed_s}"
    )
    assert observed_s >= 12, "past its 2 s burst the shadow quota would have held the free producer"
    assert abs(predicted_held - observed_held) <= AGREEMENT * observed_held, "time held at the shadow quota"
    assert abs(predicted_s - observed_s) <= max(AGREEMENT * observed_s, 1), "seconds throttled"
    page = (tmp_path / "second" / "report.html").read_text()
    assert "(shadow)" in page and "observed" in page
