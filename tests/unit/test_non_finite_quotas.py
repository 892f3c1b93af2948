"""Every way a number becomes a quota (the TOML file, a reload, AlterClientQuotas, the state file read
at start-up) refuses NaN, the infinities and values out of range, naming the key, and what any of
them accepts never puts a non-finite number in a bucket (issue 26, items 1 and 2).

Hypothesis feeds each path floats with NaN, ±Infinity, -0.0, 1e308 and subnormals mixed in, and
integers too large for a float; whatever a path accepts is charged and reloaded on a real engine.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotagate.cli import main
from quotagate.config.quota_state import load_state
from quotagate.config.reload import ConfigWatcher
from quotagate.config.settings import Config, ConfigError, parse_config
from quotagate.protocol.client_quotas import Alteration, QuotaOp
from quotagate.quotas import QuotaEngine, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.admin import INVALID_REQUEST, alter, effective

BASE = '[proxy]\nbootstrap_servers = ["k:1"]\n'
HOSTILE = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e308, 5e-324, 2.2250738585072014e-308, 1e-7, 9.3e18, 1.5]
numbers = st.one_of(
    st.sampled_from(HOSTILE),
    st.floats(),  # NaN, infinities and subnormals included
    st.integers(min_value=-(2**70), max_value=2**70),
)
keys = st.sampled_from(list(QuotaKey))


def toml_number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def assert_buckets_stay_finite(table: QuotaTable, windows: QuotaWindows) -> None:
    """Charges every key of every client a range of amounts over time, reloads, and checks each
    bucket's numbers and each throttle."""
    engine = QuotaEngine(QuotaTable(), windows)
    engine.update(table, windows, 0.0)
    now = 0.0
    for amount in (0, 1, 1e3, 2**31 - 1, 1e12):
        now += 0.25
        for key in QuotaKey:
            throttle = engine.charge("u", "c", key, amount, now)
            assert isinstance(throttle, int) and throttle >= 0, (key, amount, throttle)
    engine.update(table, windows, now + 1)  # a reload keeps each bucket's debt
    for key in QuotaKey:
        assert engine.throttle_ms("u", "c", key, now + 2) >= 0
    for bucket_id, bucket in engine.buckets.items():
        numbers = (bucket.rate, bucket.burst, bucket.tokens, bucket.updated)
        assert all(math.isfinite(n) for n in numbers), (bucket_id, numbers)
        assert bucket.rate > 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=keys, value=numbers)
def test_the_file_refuses_a_quota_that_is_not_finite_and_in_range_naming_the_key(key: QuotaKey, value: float) -> None:
    text = BASE + f'[[quotas]]\nuser = "u"\n{key.value} = {toml_number(value)}\n'
    try:
        config = parse_config(text)
    except ConfigError as exc:
        assert exc.key == f"quotas[0].{key.value}"
        return
    assert math.isfinite(value) and value > 0
    assert_buckets_stay_finite(config.quotas, config.windows)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["quota_window_size_seconds", "controller_quota_window_size_seconds"]), value=numbers)
def test_the_file_refuses_window_sizes_that_are_not_finite_and_in_range(name: str, value: float) -> None:
    text = f"{name} = {toml_number(value)}\n" + BASE + '[[quotas]]\nuser = "u"\nrequest_percentage = 9.2e18\n'
    text += "controller_mutation_rate = 9.2e18\nproducer_byte_rate = 9223372036854775807\n"
    try:
        config = parse_config(text)
    except ConfigError as exc:
        assert exc.key == name
        return
    assert_buckets_stay_finite(config.quotas, config.windows)


@settings(max_examples=300, deadline=None)
@given(key=keys, value=numbers)
def test_alter_client_quotas_refuses_what_is_not_finite_and_in_range_and_stores_nothing(
    key: QuotaKey, value: float
) -> None:
    api: dict = {}
    (result,) = alter(api, [Alteration((("user", "u"),), (QuotaOp(key.value, value, False),))], validate_only=False)
    if result.error_code:
        assert result.error_code == INVALID_REQUEST and key.value in (result.error_message or "")
        assert api == {}
        return
    assert math.isfinite(value) and value > 0
    assert_buckets_stay_finite(effective(QuotaTable(), api), QuotaWindows())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=keys, value=numbers)
def test_the_state_file_read_at_start_up_refuses_what_is_not_finite_and_in_range(
    tmp_path: Path, key: QuotaKey, value: float
) -> None:
    path = tmp_path / "state.json"
    entry = {"user": "u", "client_id": None, "values": {key.value: value}}
    path.write_text(json.dumps({"version": 1, "quotas": [entry]}))  # NaN and Infinity as Python writes them
    try:
        stored = load_state(path)
    except ConfigError as exc:
        assert exc.key == "admin.state_file" and key.value in exc.problem
        return
    assert math.isfinite(value) and value > 0
    assert_buckets_stay_finite(effective(QuotaTable(), stored), QuotaWindows())


@pytest.mark.parametrize(
    ("key", "literal", "problem"),
    [
        ("producer_byte_rate", "inf", "must be a finite number, got inf"),
        ("producer_byte_rate", "1e400", "must be a finite number, got inf"),
        ("request_percentage", "nan", "must be a finite number, got nan"),
        ("controller_mutation_rate", "-inf", "must be a finite number, got -inf"),
        ("consumer_byte_rate", "99999999999999999999", "must be at most 9223372036854775807"),
        ("request_percentage", "5e-324", "must be at least 1e-06"),
        ("producer_byte_rate", "5e-324", "must be a Long value"),
    ],
)
def test_check_config_exits_2_and_names_the_key_of_a_non_finite_quota(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, literal: str, problem: str
) -> None:
    path = tmp_path / "q.toml"
    path.write_text(BASE + f'[[quotas]]\nclient_id = "<default>"\n{key} = {literal}\n')
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"quotas[0].{key}: {problem}" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("literal", ["inf", "nan", "1e400"])
def test_a_reload_of_a_non_finite_quota_is_rejected_and_a_later_good_file_applies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, literal: str
) -> None:
    path = tmp_path / "q.toml"
    path.write_text(BASE + '[[quotas]]\nuser = "a"\nproducer_byte_rate = 100\n')
    applied: list[Config] = []
    results: list[bool] = []
    watcher = ConfigWatcher(path, applied.append, results.append)
    path.write_text(BASE + f'[[quotas]]\nuser = "a"\nrequest_percentage = {literal}\n')
    with caplog.at_level(logging.ERROR, logger="quotagate.config"):
        assert not watcher.reload()
    assert "quotas[0].request_percentage: must be a finite number" in caplog.text
    path.write_text(BASE + '[[quotas]]\nuser = "a"\nproducer_byte_rate = 500\n')
    assert watcher.reload()
    assert results == [False, True]
    assert applied[-1].quotas.resolve("a", "x", QuotaKey.PRODUCER_BYTE_RATE).value == 500  # type: ignore[union-attr]


def test_a_state_file_holding_nan_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"version": 1, "quotas": [{"user": "u", "client_id": null, "values": '
                    '{"request_percentage": NaN}}]}')  # fmt: skip
    with pytest.raises(ConfigError, match=r"admin.state_file: .*request_percentage must be a finite number, got nan"):
        load_state(path)


@pytest.mark.parametrize("literal", ["nan", "inf", "1e400", "-0.0"])
@pytest.mark.parametrize(
    ("section", "key"), [("proxy", "connect_timeout_seconds"), ("usage", "flush_interval_seconds")]
)
def test_the_files_other_numbers_are_finite_and_in_range(section: str, key: str, literal: str) -> None:
    text = BASE + (f"{key} = {literal}\n" if section == "proxy" else f"[usage]\n{key} = {literal}\n")
    with pytest.raises(ConfigError, match=rf"{section}\.{key}: must be a number > 0 and at most"):
        parse_config(text)
