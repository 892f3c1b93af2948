"""Per-topic bytes-in thresholds (seed 002): refuse only when the total and the topic are both over."""

from quotagate.quotas.topic_thresholds import TopicThresholdGuard, TopicThresholds


def guard(total: int, **topics: int) -> TopicThresholdGuard:
    return TopicThresholdGuard(TopicThresholds(total, topics), burst_seconds=1.0)


def test_topics_without_a_threshold_share_the_remainder_equally() -> None:
    g = guard(1000, orders=400)
    g.record({"clicks": 1, "views": 1}, now=0.0)
    assert g.threshold("orders", now=0.0) == 400
    assert g.threshold("clicks", now=0.0) == 300
    assert g.threshold("views", now=0.0) == 300


def test_nothing_is_refused_while_the_total_is_under_its_threshold() -> None:
    g = guard(1000, orders=100)
    g.record({"orders": 900}, now=0.0)  # orders far over its 100, total still under 1000
    assert g.refused(["orders"], now=0.0) == set()


def test_only_topics_over_their_own_threshold_are_refused_when_the_total_is_over() -> None:
    g = guard(1000, orders=100, clicks=800)
    g.record({"orders": 500, "clicks": 600}, now=0.0)  # total 1100 > 1000; orders over, clicks under
    assert g.refused(["orders", "clicks"], now=0.0) == {"orders"}


def test_refusals_end_once_the_buckets_refill() -> None:
    g = guard(1000, orders=100)
    g.record({"orders": 1200}, now=0.0)
    assert g.refused(["orders"], now=0.0) == {"orders"}
    assert g.refused(["orders"], now=0.5) == set()  # total back above zero after 0.2 s


def test_a_refusal_says_when_the_topic_will_be_accepted_again() -> None:
    g = guard(1000, orders=100)
    g.record({"orders": 1200}, now=0.0)  # total: −200 → 200 ms; orders: −1100 → 11 s
    assert g.retry_after_ms(["orders"], now=0.0) == 200
