"""The Textual application of `quotagate top` (the `top` extra): a thin layer over `TopTable`.

It reads the proxies every `interval` seconds in a worker thread (the screen never waits on a
proxy), hands the results to the table and draws its rows; keys change the table's sort and filter.
Everything it shows is computed in quotagate.top.rows; here are only colours and keys.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Input, Static

from quotagate.top.rows import MEASURES, TENANT, Row, TopTable, Usage, format_amount, throttle_text, usage_bar
from quotagate.top.scrape import ProxyUnreachable, Scrape

Poll = Callable[[], Mapping[str, Scrape | ProxyUnreachable]]


def _bar_style(used: float | None) -> str:
    if used is None:
        return "dim"
    return "red" if used >= 1.0 else "yellow" if used >= 0.8 else "green"


def usage_cell(usage: Usage, unit: str) -> Text:
    """`  4.1 kB/s ███▍···· 10 kB/s`: the rate, the quota as a bar (its empty part the headroom), the quota."""
    quota = format_amount(usage.quota, unit) if usage.quota is not None else "no quota"
    if usage.shadow:
        quota += " (shadow)"
    return Text.assemble(
        (format_amount(usage.rate, unit).rjust(10), "bold" if usage.rate else ""),
        " ",
        (usage_bar(usage.used), _bar_style(usage.used)),
        " ",
        (quota, "dim" if usage.quota is None else ""),
    )


def shown(name: str) -> Text:
    """A name a client chose, drawn as written: as Text, never a string DataTable reads as markup ("[/]"
    raised MarkupError and stopped the view, "[link=...]" made a link), and each character that is not
    printable as its escape (no ESC from a client id is handed to the operator's terminal)."""
    if not name.isprintable():
        name = "".join(char if char.isprintable() else repr(char)[1:-1] for char in name)
    return Text(name)


def row_cells(row: Row) -> list[Text]:
    throttle = throttle_text(row)
    return [
        shown(row.user),
        Text("(tenant)", "italic") if row.kind == TENANT else shown(row.client_id),
        *(usage_cell(row.usage[measure.name], measure.unit) for measure in MEASURES),
        Text(throttle, "bold red") if throttle else Text("–", "dim"),
        Text(str(row.muted), "bold red") if row.muted else Text("–", "dim"),
    ]


class TopApp(App[int]):
    TITLE = "quotagate top"
    CSS = """
    #status { height: auto; padding: 0 1; background: $boost; }
    #problems { height: auto; padding: 0 1; color: $text-error; }
    #filter { display: none; }
    #filter.shown { display: block; }
    #rows { height: 1fr; }
    """
    BINDINGS = [
        Binding("p", "sort('produce')", "Produce"),
        Binding("f", "sort('fetch')", "Fetch"),
        Binding("r", "sort('request')", "Request time"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter"),
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(self, table: TopTable, poll: Poll, interval: float, screenshot: Path | None = None) -> None:
        super().__init__()
        self.table = table
        self.poll = poll
        self.interval = interval
        self.screenshot = screenshot  # save the screen there as SVG once rates are known, and exit
        self.polls = 0
        self._polling = False
        self.refreshed = ""

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        yield Static(id="problems")
        yield Input(placeholder="filter: part of a user or client id (Enter keeps it, Esc clears it)", id="filter")
        yield DataTable(id="rows", cursor_type="none", zebra_stripes=True)  # the arrow keys scroll
        yield Footer()

    def on_mount(self) -> None:
        self.refreshed = time.strftime("%H:%M:%S")
        self.draw()
        self.set_interval(self.interval, self.read_proxies)
        self.query_one("#rows", DataTable).focus()

    async def read_proxies(self) -> None:
        if self._polling:  # a proxy slower than the interval: skip a beat rather than pile up reads
            return
        self._polling = True
        try:
            results = await asyncio.to_thread(self.poll)
        finally:
            self._polling = False
        self.table.update(results)
        self.polls += 1
        self.refreshed = time.strftime("%H:%M:%S")
        self.draw()
        if self.screenshot is not None and self.polls >= 2:
            self.call_after_refresh(self._save_screenshot)  # once the table has laid out its columns

    def _save_screenshot(self) -> None:
        assert self.screenshot is not None
        self.save_screenshot(self.screenshot.name, str(self.screenshot.parent))
        self.exit(0)

    def draw(self) -> None:
        table = self.table
        rows = table.rows()
        view = self.query_one("#rows", DataTable)
        view.clear(columns=True)
        sorted_mark = {measure.name: " ▼" if measure.name == table.sort_by else "" for measure in MEASURES}
        view.add_columns(
            "USER",
            "CLIENT ID",
            *(f"{measure.name.upper()}{sorted_mark[measure.name]}" for measure in MEASURES),
            "THROTTLE",
            "MUTED",
        )
        for row in rows:
            view.add_row(*row_cells(row))
        filtered = f" · filter '{table.filter_text}'" if table.filter_text else ""
        proxies = len(table.urls)
        status = (
            f"{proxies} prox{'y' if proxies == 1 else 'ies'} · sort: {table.sort_by}{filtered} · {len(rows)} rows · "
            f"every {self.interval:g} s · {self.refreshed}"
        )
        if self.polls == 0:
            status += " · rates after the next read"
        self.query_one("#status", Static).update(Text(status))  # the filter as typed, not markup
        notes = [f"✖ {shown(problem)}" for problem in table.problems.values()]
        if note := table.sharing_note():
            notes.append(f"! {note}")
        problems = self.query_one("#problems", Static)
        problems.update(Text("\n".join(notes)))  # errors may quote what a proxy sent
        problems.display = bool(notes)

    def action_sort(self, measure: str) -> None:
        self.table.set_sort(measure)
        self.draw()

    def action_filter(self) -> None:
        field = self.query_one("#filter", Input)
        field.add_class("shown")
        field.value = self.table.filter_text
        field.focus()

    def action_clear_filter(self) -> None:
        field = self.query_one("#filter", Input)
        field.value = ""
        self._close_filter()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.table.filter_text = event.value
        self.draw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._close_filter()

    def _close_filter(self) -> None:
        field = self.query_one("#filter", Input)
        field.remove_class("shown")
        self.table.filter_text = field.value
        self.query_one("#rows", DataTable).focus()
        self.draw()
