"""The rows of `quotagate top`, from successive scrapes of one or several proxies: each entity's
rates (differences of its counters between two scrapes of the same proxy, summed over the proxies),
its quota and headroom per measure, its throttle and its muted connections; sorted and filtered.
No terminal here: the Textual app (`quotagate.top.app`) only draws what `TopTable.rows` returns.

Several proxies: a quota is one quota for the whole cluster (shared through Redis, or split 1/N
between the processes: docs/scaling.md), so an entity's rates are summed over the proxies and
compared with its one quota, never with the quota times the proxies. Proxies that do not share
their quotas (each alone: quotagate_cluster_processes 0) each grant the whole quota; `sharing_note`
says so rather than hide it.

Rows have a kind: "entity" for (user, client id), "tenant" for a tenant ([[tenants]]: its members'
counters summed by the proxy, its one shared quota), whose `user` is the tenant's name and client id
empty; sorting, filtering and drawing go by row, not by kind.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from quotagate.quotas import QuotaKey
from quotagate.quotas.engine import tokens_per_second
from quotagate.top.scrape import (
    FETCH_BYTES,
    PRODUCE_BYTES,
    REQUEST_SECONDS,
    Entity,
    ProxyUnreachable,
    QuotaState,
    RowKey,
    Scrape,
    TenantKey,
)

ENTITY = "entity"
TENANT = "tenant"
OTHER: Entity = ("other", "other")  # the proxy's sum of the entities beyond metrics.max_entities


@dataclass(frozen=True, slots=True)
class Measure:
    """One column of the view: a counter, the quota key that limits it, and their units."""

    name: str
    counter: str
    key: QuotaKey
    tokens_per_count: float  # the quota's tokens one unit of the counter is (1 byte; 1 s = 1000 ms)
    unit: str

    def in_quota_units(self, counter_per_second: float) -> float:
        """A counter's rate in the unit its quota is written in (bytes/s, or percent for request time)."""
        return counter_per_second * self.tokens_per_count / tokens_per_second(self.key, 1.0)


MEASURES = (
    Measure("produce", PRODUCE_BYTES, QuotaKey.PRODUCER_BYTE_RATE, 1.0, "B/s"),
    Measure("fetch", FETCH_BYTES, QuotaKey.CONSUMER_BYTE_RATE, 1.0, "B/s"),
    Measure("request", REQUEST_SECONDS, QuotaKey.REQUEST_PERCENTAGE, 1000.0, "%"),
)
MEASURE_NAMES = tuple(measure.name for measure in MEASURES)


@dataclass(frozen=True, slots=True)
class Usage:
    """One measure of one row: its rate now and its quota, in the quota's unit."""

    rate: float | None  # None until two scrapes of some proxy have it
    quota: float | None  # None: no quota applies
    shadow: bool = False  # a shadow quota: tried, never applied (docs/quotas.md)

    @property
    def used(self) -> float | None:
        """The share of the quota in use (over 1 when over it); None without a rate or a quota."""
        if self.rate is None or self.quota is None or self.quota <= 0:
            return None
        return self.rate / self.quota

    @property
    def headroom(self) -> float | None:
        """What is left of the quota at this rate (negative when over it)."""
        if self.rate is None or self.quota is None:
            return None
        return self.quota - self.rate


@dataclass(frozen=True, slots=True)
class Row:
    kind: str
    user: str
    client_id: str
    usage: dict[str, Usage]  # by measure name
    throttle_ms: int  # the longest throttle any of its quotas gives now, on any proxy
    throttled_by: QuotaKey | None
    muted: int  # its client connections muted for a quota now, all proxies
    proxies: int  # how many of the proxies report it

    def matches(self, text: str) -> bool:
        """The filter: `text` in the user or the client id, ignoring case."""
        text = text.casefold()
        return text in self.user.casefold() or text in self.client_id.casefold()


def rates(before: Scrape, after: Scrape) -> dict[RowKey, dict[str, float | None]]:
    """Each entity's counters per second between two scrapes of one proxy. None where it cannot be
    told: an entity (or counter) the first scrape lacked, or a counter that went down (the proxy
    restarted, or the entity moved in or out of the exported top: docs/metrics.md)."""
    elapsed = after.at - before.at
    result: dict[RowKey, dict[str, float | None]] = {}
    for entity, counters in after.counters.items():
        earlier = before.counters.get(entity, {})
        per_entity: dict[str, float | None] = {}
        for name, value in counters.items():
            start = earlier.get(name)
            if start is None or value < start or elapsed <= 0:
                per_entity[name] = None
            else:
                per_entity[name] = (value - start) / elapsed
        result[entity] = per_entity
    return result


def _sum(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return math.fsum(known) if known else None


class TopTable:
    """The table `quotagate top` shows: fed each round's scrape (or failure) of every proxy."""

    def __init__(self, urls: Iterable[str], sort_by: str = MEASURE_NAMES[0]) -> None:
        self.urls = list(urls)
        self.sort_by = sort_by
        self.filter_text = ""
        self.latest: dict[str, Scrape] = {}  # url -> its last scrape (absent while unreachable)
        self.rates: dict[str, dict[RowKey, dict[str, float | None]]] = {}
        self.problems: dict[str, str] = {}  # url -> why it could not be read

    def update(self, results: Mapping[str, Scrape | ProxyUnreachable]) -> None:
        """One round: every proxy's new scrape, or why it failed. A proxy that failed loses its rates
        (and its last scrape: they start again from its next answer)."""
        for url, result in results.items():
            if isinstance(result, ProxyUnreachable):
                self.problems[url] = str(result)
                self.latest.pop(url, None)
                self.rates.pop(url, None)
                continue
            self.problems.pop(url, None)
            previous = self.latest.get(url)
            self.rates[url] = rates(previous, result) if previous is not None else {}
            self.latest[url] = result

    def set_sort(self, measure: str) -> None:
        if measure not in MEASURE_NAMES:
            raise ValueError(f"sort by one of {', '.join(MEASURE_NAMES)}, not {measure!r}")
        self.sort_by = measure

    def all_rows(self) -> list[Row]:
        """Every entity and tenant any reachable proxy reports, unsorted and unfiltered."""
        scrapes = [(url, self.latest[url]) for url in self.urls if url in self.latest]
        entities: set[RowKey] = set()
        for _, reading in scrapes:
            entities.update(reading.counters)
            entities.update(reading.quotas)
        return [row for entity in entities if (row := self._row(entity, scrapes)) is not None]

    def rows(self) -> list[Row]:
        """The rows shown: filtered, the busiest by the sort measure first (then by name)."""
        shown = (
            [row for row in self.all_rows() if row.matches(self.filter_text)] if self.filter_text else self.all_rows()
        )
        return sorted(shown, key=lambda row: (-(row.usage[self.sort_by].rate or 0.0), row.user, row.client_id))

    def sharing_note(self) -> str | None:
        """Said when several proxies do not share their quotas: each then grants every quota whole."""
        alone = [reading.url for reading in self.latest.values() if reading.cluster_processes == 0]
        if len(self.latest) > 1 and alone:
            return (
                f"{len(alone)} of {len(self.latest)} proxies share no quotas ([cluster]): each grants the whole "
                "quota; rates are summed and shown against one quota"
            )
        return None

    def _row(self, entity: RowKey, scrapes: list[tuple[str, Scrape]]) -> Row | None:
        """The entity's row, from the proxies that report it (in the order the user named them)."""
        seen_at = [(url, r) for url, r in scrapes if entity in r.counters or entity in r.quotas]
        seen = [reading for _, reading in seen_at]
        usage = {}
        for measure in MEASURES:
            rate = _sum(self.rates[url].get(entity, {}).get(measure.counter) for url, _ in seen_at)
            state = next((r.quotas[entity][measure.key] for r in seen if measure.key in r.quotas.get(entity, {})), None)
            usage[measure.name] = Usage(
                measure.in_quota_units(rate) if rate is not None else None,
                state.quota if state is not None else None,
                state.shadow if state is not None else False,
            )
        if entity == OTHER and not any(r.counters.get(entity, {}).get(m.counter) for r in seen for m in MEASURES):
            return None  # nobody folded into "other": no row for it
        throttle_ms, throttled_by = _throttle([r.quotas.get(entity, {}) for r in seen])
        muted = sum(reading.muted.get(entity, 0) for reading in seen)
        if isinstance(entity, TenantKey):
            return Row(TENANT, entity.name, "", usage, throttle_ms, throttled_by, muted, len(seen))
        return Row(ENTITY, entity[0], entity[1], usage, throttle_ms, throttled_by, muted, len(seen))


def _throttle(states: list[dict[QuotaKey, QuotaState]]) -> tuple[int, QuotaKey | None]:
    """The longest throttle an applied quota gives now (a shadow one's is never applied)."""
    longest, key = 0, None
    for per_key in states:
        for quota_key, state in per_key.items():
            if not state.shadow and state.throttle_ms > longest:
                longest, key = state.throttle_ms, quota_key
    return longest, key


# formatting (plain text; the app adds the colours) -----------------------------------------------
BAR_CELLS = 8
_EIGHTHS = " ▏▎▍▌▋▊▉"


def format_amount(value: float | None, unit: str) -> str:
    """`1.20 MB/s`, `950 B/s`, `12.5%`; `…` for a rate not known yet."""
    if value is None:
        return "…"
    if unit == "%":
        return f"{value:.1f}%"
    for prefix, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            scaled = value / size
            return f"{scaled:.3g} {prefix}{unit}" if scaled < 100 else f"{scaled:.0f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def usage_bar(used: float | None, cells: int = BAR_CELLS) -> str:
    """The quota as `cells` cells, filled as far as it is used (in eighths of a cell); all full when
    over it; blanks without a quota or a rate. What is not filled is the headroom."""
    if used is None:
        return " " * cells
    eighths = round(min(max(used, 0.0), 1.0) * cells * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[part] if part else "")).ljust(cells, "·")


def throttle_text(row: Row) -> str:
    if row.throttle_ms <= 0 or row.throttled_by is None:
        return ""
    group = next((measure.name for measure in MEASURES if measure.key is row.throttled_by), row.throttled_by.value)
    return (
        f"{group} {row.throttle_ms / 1000:.2f}s" if row.throttle_ms < 10_000 else f"{group} {row.throttle_ms // 1000}s"
    )
