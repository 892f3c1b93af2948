"""`quotagate top` as a person uses it: a real proxy in front of the test Kafka, a real producer over
its quota, and the command in a tmux terminal of 160 x 40; keys are sent, the pane is captured, and
what is on screen is checked. Each test ends its tmux server (a socket of its own) whatever happens."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.kafka_clients import WINDOWS, Acked, confluent_producer_loop, quota_config
from tests.support.kafka_helpers import create_topic, unique_topic
from tests.support.proxy_fixtures import REPO_ROOT

QUOTA = 40_000  # bytes/s: a producer at full speed is held to it, so it is throttled while top looks


class Terminal:
    """A tmux server of its own (`-L`), one session of 160 x 40 running one command."""

    def __init__(self, name: str) -> None:
        self.socket = f"quotagate-top-{os.getpid()}-{name}"

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        # env: os.environ's, without the LINES and COLUMNS that readline (imported under pytest) puts in the
        # process's C environment, which would tell the program in the pane it has 80 x 24.
        environment = {name: value for name, value in os.environ.items() if name not in ("LINES", "COLUMNS")}
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10, env=environment
        )

    def start(self, command: str) -> None:
        started = self.tmux("new-session", "-d", "-s", "top", "-x", "160", "-y", "40", "-c", str(REPO_ROOT), command)
        assert started.returncode == 0, f"tmux did not start: {started.stderr}"

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "top").stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "top", *keys)

    def running(self) -> bool:
        return self.tmux("has-session", "-t", "top").returncode == 0

    def wait_for(self, check: Callable[[str], bool], what: str, seconds: float = 10.0) -> str:
        deadline = time.monotonic() + seconds
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if check(screen):
                return screen
            time.sleep(0.1)
        size = self.tmux("display", "-p", "-t", "top", "#{window_width}x#{window_height}").stdout.strip()
        raise AssertionError(f"not on screen after {seconds} s: {what}; the screen ({size}):\n{screen}")

    def close(self) -> None:
        self.tmux("kill-server")
        # tmux leaves its socket file behind (-L NAME: $TMUX_TMPDIR/tmux-UID/NAME)
        folder = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
        (folder / self.socket).unlink(missing_ok=True)


@pytest.fixture
def terminals() -> Iterator[Callable[[str], Terminal]]:
    assert shutil.which("tmux"), "tmux is not installed: run `make tmux-tool` (make test does)"
    opened: list[Terminal] = []

    def terminal(name: str) -> Terminal:
        opened.append(Terminal(name))
        return opened[-1]

    yield terminal
    for terminal_ in opened:
        terminal_.close()


def top_command(url: str, exit_file: Path) -> str:
    """`quotagate top --url URL` as typed in a shell, its exit status written to exit_file."""
    return f"{sys.executable} -m quotagate top --url {url}; echo $? > {exit_file}"


def exit_status(exit_file: Path, seconds: float = 10.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if exit_file.exists() and exit_file.read_text().strip():
            return exit_file.read_text().strip()
        time.sleep(0.1)
    raise AssertionError(f"quotagate top had not exited {seconds} s after the key")


def line_of(screen: str, client_id: str) -> str:
    return next((line for line in screen.splitlines() if client_id in line), "")


def produce_rate(line: str) -> float:
    """The row's produce rate in bytes/s (the first amount after the client id), 0 while not known."""
    found = re.search(r"^\s*\S+\s+\S+\s+([\d.]+) (k|M|G)?B/s", line)
    if found is None:
        return 0.0
    return float(found[1]) * {"k": 1e3, "M": 1e6, "G": 1e9}.get(found[2] or "", 1.0)


def test_top_shows_a_throttled_producer_sorts_filters_and_quits_on_q_and_ctrl_c(
    proxy_factory, kafka, terminals, tmp_path: Path
) -> None:
    proxy = proxy_factory(
        kafka.bootstrap,
        WINDOWS
        + quota_config(f'client_id = "top-loader"\nproducer_byte_rate = {QUOTA}')
        + '\n[[tenants]]\nname = "loaders"\nclient_id_prefixes = ["top-"]\n',  # a row of its own, no quota
    )
    url = f"http://127.0.0.1:{proxy.metrics_port}"
    topic = unique_topic("top")
    create_topic(proxy.bootstrap, topic, partitions=1)
    # A small send queue: the producer's last flush at 40 kB/s is short.
    producing = threading.Thread(
        target=confluent_producer_loop,
        args=(proxy.bootstrap, topic, "top-loader", 6.0, Acked(), {"queue.buffering.max.kbytes": 64}),
        daemon=True,
    )
    producing.start()

    first = terminals("first")
    first.start(top_command(url, tmp_path / "first.exit"))
    screen = first.wait_for(lambda s: produce_rate(line_of(s, "top-loader")) > 0, "top-loader's produce rate")
    row = line_of(screen, "top-loader")
    assert "40 kB/s" in row and "█" in row, f"the quota, 40 000 B/s, and a bar of its use: {row!r}"
    assert "PRODUCE ▼" in screen and "sort: produce" in screen, screen
    screen = first.wait_for(lambda s: "produce 0." in line_of(s, "top-loader"), "top-loader's produce throttle")
    print(screen)
    screen = first.wait_for(lambda s: produce_rate(line_of(s, "(tenant)")) > 0, "the tenant's row and its rate")
    assert line_of(screen, "(tenant)").split()[0] == "loaders" and "no quota" in line_of(screen, "(tenant)"), screen

    first.keys("f")
    first.wait_for(lambda s: "FETCH ▼" in s and "sort: fetch" in s, "the sort by fetch")
    first.keys("/")
    first.wait_for(lambda s: "filter: part of a user or client id" in s, "the filter's input")
    first.keys("z", "z", "z")
    first.wait_for(lambda s: "filter 'zzz'" in s and "top-loader" not in s, "no row matching zzz")
    first.keys("Escape")
    first.wait_for(lambda s: "top-loader" in s and "filter" not in s.splitlines()[0], "the filter cleared")
    first.keys("/")
    first.wait_for(lambda s: "filter: part of a user or client id" in s, "the filter's input")
    first.keys("l", "o", "a", "d", "Enter")
    first.wait_for(lambda s: "filter 'load'" in s and "top-loader" in s, "the row matching load")
    first.keys("q")
    assert exit_status(tmp_path / "first.exit") == "0"
    assert not first.running(), "the terminal's command ended with quotagate top"

    second = terminals("second")
    second.start(top_command(url, tmp_path / "second.exit"))
    second.wait_for(lambda s: "top-loader" in s, "top-loader in a second top")
    producing.join(30)
    proxy.stop()
    screen = second.wait_for(lambda s: f"cannot read {url}/metrics" in s, "the unreachable proxy, named")
    second.keys("C-c")
    assert exit_status(tmp_path / "second.exit") == "0"
