"""Kafka's sampled-rate rule (quotagate.quotas.sampled_rate), the what-if job's comparison."""

from __future__ import annotations

from quotagate.quotas.sampled_rate import SampledRate


def test_a_burst_is_throttled_by_its_excess_over_the_padded_span() -> None:
    # 11 windows of 1 s: a first burst of 2000 at 0.5 s, quota 100/s, is measured over its 0.5 s
    # padded with 10 whole windows: 10.5 s, observed 190.5/s: (190.5 − 100) / 100 × 10.5 s = 9.5 s
    assert SampledRate(100.0).record(2000.0, 0.5) == 9_500


def test_the_burst_keeps_throttling_until_its_window_leaves_the_span() -> None:
    rate = SampledRate(100.0)
    rate.record(2000.0, 0.5)
    assert rate.record(1.0, 10.5) > 0, "still inside the 11 windows"
    assert rate.record(1.0, 11.5) == 0, "its window has left the span"


def test_recording_all_at_once_answers_as_recording_one_by_one() -> None:
    times = [0.1 * i for i in range(300)]
    amounts = [float(50 + 40 * (i % 7)) for i in range(300)]
    one_by_one = SampledRate(900.0, samples=5, window_seconds=0.5)
    at_once = SampledRate(900.0, samples=5, window_seconds=0.5)
    expected = [one_by_one.record(a, t) for a, t in zip(amounts, times, strict=True)]
    assert at_once.record_all(amounts[:100], times[:100]) + at_once.record_all(amounts[100:], times[100:]) == expected
    assert any(expected) and not all(expected)
