"""`quotagate top`'s data (quotagate/top/scrape.py, rows.py) from what real endpoint code renders:
each proxy here is the endpoints' own collectors and /quotas over a quota engine (tests/support/
admin_context.py), read at two times; the rows must show the rates, quotas, headroom, throttle and
mutes those imply. tests/integration/test_top.py drives the real command in tmux."""

from __future__ import annotations

import pytest

from quotagate.protocol.api_keys import ApiKey
from quotagate.quotas import QuotaKey
from quotagate.quotas.apis import policy
from quotagate.quotas.charging import count_exchange
from quotagate.top.rows import TopTable, Usage, format_amount, throttle_text, usage_bar
from quotagate.top.scrape import ProxyUnreachable, Scrape, base_url, parse_scrape
from tests.support.admin_context import Client, Session, State, state

QUOTAS = (
    '[[quotas]]\nuser = "alice"\nproducer_byte_rate = 10000\n'
    '[[quotas]]\nclient_id = "reader"\nconsumer_byte_rate = 50000\nrequest_percentage = 50\n'
)


def produce(proxy: State, user: str, client_id: str, size: int, throttle_ms: int = 0) -> None:
    entity = proxy.entity_metrics.entity(user, client_id, proxy.loop.time())
    count_exchange(entity, policy(ApiKey.PRODUCE), size, 50, 2.0, throttle_ms)


def fetch(proxy: State, user: str, client_id: str, size: int, request_ms: float = 2.0) -> None:
    entity = proxy.entity_metrics.entity(user, client_id, proxy.loop.time())
    count_exchange(entity, policy(ApiKey.FETCH), 80, size, request_ms, 0)


def read(proxy: State, url: str = "http://proxy-a:9190") -> Scrape:
    """One scrape of the proxy's endpoints, stamped with its clock."""
    return parse_scrape(url, proxy.loop.time(), proxy.metrics_text(), proxy.quotas())


def advance(proxy: State, seconds: float) -> None:
    proxy.loop.now += seconds


def row_of(table: TopTable, user: str, client_id: str):
    (row,) = [row for row in table.rows() if (row.user, row.client_id) == (user, client_id)]
    return row


def test_rates_are_counter_differences_over_the_time_between_two_scrapes() -> None:
    proxy = state(QUOTAS)
    produce(proxy, "alice", "app", 1_000)
    table = TopTable(["a"])
    table.update({"a": read(proxy)})
    assert row_of(table, "alice", "app").usage["produce"].rate is None, "one scrape tells no rate"
    advance(proxy, 2.0)
    produce(proxy, "alice", "app", 8_000)
    table.update({"a": read(proxy)})
    usage = row_of(table, "alice", "app").usage["produce"]
    assert usage.rate == pytest.approx(4_000), "8 000 bytes over 2 s"
    assert usage.quota == 10_000 and usage.used == pytest.approx(0.4) and usage.headroom == pytest.approx(6_000)


def test_request_time_is_shown_in_the_quotas_unit_percent_of_one_thread() -> None:
    proxy = state(QUOTAS)
    fetch(proxy, "bob", "reader", 100)
    table = TopTable(["a"])
    table.update({"a": read(proxy)})
    advance(proxy, 1.0)
    fetch(proxy, "bob", "reader", 20_000, request_ms=250.0)  # 0.25 s of request time in 1 s: 25 %
    table.update({"a": read(proxy)})
    row = row_of(table, "bob", "reader")
    assert row.usage["request"].rate == pytest.approx(25.0)
    assert row.usage["request"].quota == 50 and row.usage["request"].used == pytest.approx(0.5)
    assert row.usage["fetch"].rate == pytest.approx(20_000) and row.usage["fetch"].quota == 50_000
    assert row.usage["produce"].quota is None, "no produce quota applies to bob/reader"


def test_an_entity_over_its_quota_shows_its_throttle_and_muted_connections() -> None:
    proxy = state(QUOTAS)
    now = proxy.loop.time()
    proxy.engine.charge("alice", "app", QuotaKey.PRODUCER_BYTE_RATE, 200_000, now)  # deep in debt
    produce(proxy, "alice", "app", 200_000, throttle_ms=5_000)
    proxy.clients = [Client(Session("alice", "app"), muted=True)]
    table = TopTable(["a"])
    table.update({"a": read(proxy)})
    row = row_of(table, "alice", "app")
    assert row.throttled_by is QuotaKey.PRODUCER_BYTE_RATE and row.throttle_ms > 1_000, row
    assert row.muted == 1
    assert throttle_text(row).startswith("produce ")


def test_an_entitys_rates_are_summed_over_the_proxies_against_its_one_quota() -> None:
    proxies = {"a": state(QUOTAS), "b": state(QUOTAS, now=500.0)}  # clocks of their own
    for proxy in proxies.values():
        produce(proxy, "alice", "app", 100)
    table = TopTable(proxies)
    table.update({url: read(proxy, url) for url, proxy in proxies.items()})
    advance(proxies["a"], 1.0)
    advance(proxies["b"], 2.0)
    produce(proxies["a"], "alice", "app", 3_000)  # 3 000 B/s
    produce(proxies["b"], "alice", "app", 4_000)  # 2 000 B/s
    table.update({url: read(proxy, url) for url, proxy in proxies.items()})
    row = row_of(table, "alice", "app")
    assert row.proxies == 2
    assert row.usage["produce"].rate == pytest.approx(5_000)
    assert row.usage["produce"].quota == 10_000, "one quota for the cluster, not one per proxy"
    assert "share no quotas" in (table.sharing_note() or ""), "two lone proxies each grant the whole quota"


def test_a_counter_that_went_down_gives_no_rate_until_the_next_scrape() -> None:
    proxy = state(QUOTAS)
    produce(proxy, "alice", "app", 50_000)
    table = TopTable(["a"])
    table.update({"a": read(proxy)})
    restarted = state(QUOTAS)  # the proxy restarted: its counters start again from 0
    produce(restarted, "alice", "app", 1_000)
    advance(restarted, 1.0)
    table.update({"a": read(restarted)})
    assert row_of(table, "alice", "app").usage["produce"].rate is None
    advance(restarted, 1.0)
    produce(restarted, "alice", "app", 500)
    table.update({"a": read(restarted)})
    assert row_of(table, "alice", "app").usage["produce"].rate == pytest.approx(500)


def test_rows_sort_by_the_chosen_measure_and_filter_on_user_or_client_id() -> None:
    proxy = state(QUOTAS)
    entities = {("alice", "app"): (9_000, 100), ("bob", "reader"): (1_000, 70_000), ("carol", "etl"): (5_000, 5_000)}
    for (user, client_id), _ in entities.items():
        produce(proxy, user, client_id, 1)
        fetch(proxy, user, client_id, 1)
    table = TopTable(["a"])
    table.update({"a": read(proxy)})
    advance(proxy, 1.0)
    for (user, client_id), (produced, fetched) in entities.items():
        produce(proxy, user, client_id, produced)
        fetch(proxy, user, client_id, fetched)
    table.update({"a": read(proxy)})
    assert [row.user for row in table.rows()] == ["alice", "carol", "bob"], "by produce rate, the default"
    table.set_sort("fetch")
    assert [row.user for row in table.rows()] == ["bob", "carol", "alice"]
    table.filter_text = "READ"
    assert [(row.user, row.client_id) for row in table.rows()] == [("bob", "reader")], "client id, any case"
    table.filter_text = "car"
    assert [row.user for row in table.rows()] == ["carol"]
    with pytest.raises(ValueError, match="produce, fetch, request"):
        table.set_sort("bytes")


def test_an_unreachable_proxy_is_named_and_its_rates_start_again_when_it_answers() -> None:
    proxies = {"a": state(QUOTAS), "b": state(QUOTAS)}
    for proxy in proxies.values():
        produce(proxy, "alice", "app", 100)
    table = TopTable(proxies)
    table.update({url: read(proxy, url) for url, proxy in proxies.items()})
    advance(proxies["a"], 1.0)
    produce(proxies["a"], "alice", "app", 2_000)
    table.update({"a": read(proxies["a"], "a"), "b": ProxyUnreachable("http://b:9190/metrics", "Connection refused")})
    assert table.problems == {"b": "cannot read http://b:9190/metrics: Connection refused"}
    row = row_of(table, "alice", "app")
    assert (row.proxies, row.usage["produce"].rate) == (1, pytest.approx(2_000)), "the other proxy still counts"
    table.update({url: read(proxy, url) for url, proxy in proxies.items()})
    assert table.problems == {}
    assert row_of(table, "alice", "app").proxies == 2


def test_the_sum_of_entities_beyond_the_exported_top_is_a_row_only_when_it_has_traffic() -> None:
    proxy = state(QUOTAS)
    produce(proxy, "alice", "app", 100)
    table = TopTable(["a"])
    table.update({"a": read(proxy)})
    assert [(row.user, row.client_id) for row in table.rows()] == [("alice", "app")]


def test_metrics_urls_are_taken_as_users_type_them() -> None:
    assert base_url("127.0.0.1:9190") == "http://127.0.0.1:9190"
    assert base_url("http://proxy:9190/metrics") == "http://proxy:9190"
    assert base_url("https://proxy:9190/") == "https://proxy:9190"


def test_amounts_and_bars_read_at_a_glance() -> None:
    assert format_amount(None, "B/s") == "…"
    assert format_amount(950, "B/s") == "950 B/s"
    assert format_amount(12_345, "B/s") == "12.3 kB/s"
    assert format_amount(1_200_000, "B/s") == "1.2 MB/s"
    assert format_amount(250_000_000, "B/s") == "250 MB/s"
    assert format_amount(37.25, "%") == "37.2%"
    assert usage_bar(None) == " " * 8
    assert usage_bar(0.0) == "········"
    assert usage_bar(0.5) == "████····"
    assert usage_bar(3.0) == "████████", "over the quota: full"
    assert usage_bar(0.5 + 1 / 16) == "████▌···"
    assert Usage(rate=5.0, quota=None).used is None


def test_a_tenant_is_a_row_of_its_own_summing_its_members_against_its_one_shared_quota() -> None:
    proxy = state(QUOTAS + '[[tenants]]\nname = "team"\nusers = ["alice", "carol"]\nproducer_byte_rate = 30000\n')
    produce(proxy, "alice", "app", 1_000)
    produce(proxy, "carol", "app", 1_000)
    table = TopTable(["a"])
    table.update({"a": read(proxy)})
    advance(proxy, 2.0)
    produce(proxy, "alice", "app", 20_000)
    produce(proxy, "carol", "other", 20_000)  # a new client id of a member: in the tenant too
    produce(proxy, "dave", "app", 50_000)  # outside it
    proxy.engine.charge("carol", "other", QuotaKey.PRODUCER_BYTE_RATE, 400_000, proxy.loop.time())
    proxy.clients = [Client(Session("carol", "other"), muted=True)]
    table.update({"a": read(proxy)})
    (row,) = [row for row in table.rows() if row.kind == "tenant"]
    assert (row.user, row.client_id) == ("team", "")
    assert row.usage["produce"].rate == pytest.approx(20_000), "alice's 20 000 over 2 s (carol/other is new)"
    assert row.usage["produce"].quota == 30_000 and row.usage["fetch"].quota is None
    # the tenant's bucket: 11 s of burst (330 000) less 400 000 -> 70 000 in debt at 30 000/s
    assert (row.throttled_by, row.throttle_ms) == (QuotaKey.PRODUCER_BYTE_RATE, 2_333), row
    assert row.muted == 1
    assert row_of(table, "dave", "app").kind == "entity"
    table.filter_text = "tea"
    assert [r.kind for r in table.rows()] == ["tenant"]


@pytest.mark.parametrize(
    ("name", "drawn"),
    [(name, name) for name in ("[/]", "[bold]loud", "[link=https://example.com]x", "[[tenants]]", "é")]
    + [("a\x1b]52;c;eA==\x1b\\b", "a\\x1b]52;c;eA==\\x1b\\b"), ("l1\nl2\x00", "l1\\nl2\\x00")],
)
def test_names_are_drawn_as_written_never_as_markup_or_terminal_controls(name: str, drawn: str) -> None:
    """A client picks its own client id (and an operator a tenant's name): DataTable reads a string cell
    as Rich markup, where "[/]" raised MarkupError and stopped `top`; and no ESC is handed to the
    operator's terminal. Each cell is drawn verbatim, control characters as their escapes."""
    from textual.widgets._data_table import default_cell_formatter

    from quotagate.top.app import row_cells
    from quotagate.top.rows import ENTITY, MEASURES, TENANT, Row

    usage = {measure.name: Usage(1.0, None) for measure in MEASURES}
    for kind in (ENTITY, TENANT):
        cells = row_cells(Row(kind, name, name, usage, 0, None, 0, 1))
        plain = [default_cell_formatter(cell).plain for cell in cells[:2]]
        assert plain == [drawn, drawn if kind == ENTITY else "(tenant)"], f"{kind} row drew {plain}"
