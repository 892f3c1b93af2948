"""Usage files whole or absent on a real full filesystem (issue 34 item 7): a proxy writes its usage
records to a small tmpfs while real produce requests go through it; the tmpfs is filled, then freed.

Before: the Parquet file open when the disk filled was renamed into place without a footer (36 022
rows counted written, 34 352 readable), every flush while full left a 0-byte hidden `.open` file
that SIGTERM did not remove, and a JSONL write glued a partial line to the next flush's first line.
Now every file left is readable, no hidden file is left, and the rows written plus the requests
counted lost are exactly the requests the proxy recorded.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.kafka_helpers import create_topic, unique_topic, wait_until
from tests.support.proxy_fixtures import metric
from tests.support.topic_flood import produce_frame, read_frame

TMPFS_BYTES = 4 * 1024 * 1024


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for the test (root only: skipped where mounting is not permitted)."""
    mount_point = tmp_path / "usage"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount permission): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(folder: Path) -> Path:
    """Writes a file until the filesystem is full; returns it (removing it frees the space)."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    block = b"\0" * 65536
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    return filler


class Producer:
    """Produce requests one at a time on one connection (no ApiVersions, no Metadata): the proxy
    records exactly the requests sent."""

    def __init__(self, address: tuple[str, int], topic: str) -> None:
        import socket

        self.sock = socket.create_connection(address, timeout=30)
        self.frame = produce_frame([topic], 0, "full-disk")
        self.sent = 0

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.sent += 1
            self.sock.sendall(self.frame[:8] + self.sent.to_bytes(4, "big") + self.frame[12:])
            read_frame(self.sock)
            time.sleep(0.002)


def unfinished(folder: Path) -> list[str]:
    """Hidden files (a Parquet file being written is `.usage-....parquet.open`)."""
    return [path.name for path in folder.rglob(".*") if path.is_file()]


def usage_counts(proxy) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    return metric(proxy, "quotagate_usage_records_written_total"), metric(
        proxy, "quotagate_usage_records_dropped_total"
    )


@pytest.mark.parametrize(("sink", "records"), [("parquet", "request"), ("parquet", "aggregate"), ("jsonl", "request")])
def test_usage_files_stay_whole_through_a_full_disk_and_every_request_is_counted(
    proxy_factory, kafka, small_tmpfs: Path, sink: str, records: str
) -> None:
    topic = unique_topic("full-disk")
    create_topic(kafka.bootstrap, topic, partitions=1)
    proxy = proxy_factory(
        kafka.bootstrap,
        f'[usage]\nenabled = true\nsink = "{sink}"\nrecords = "{records}"\ndirectory = "{small_tmpfs}"\n'
        "flush_interval_seconds = 0.2\nmax_file_seconds = 1.0\ninterval_seconds = 0.1\n",
    )
    producer = Producer(("127.0.0.1", proxy.port), topic)
    producer.run(2.0)  # files written, some closed, one open
    filler = fill(small_tmpfs)
    producer.run(4.0)  # every write fails: the open file, new ones, footers
    wait_until(lambda: usage_counts(proxy)[1] > 0, 20, "records counted lost while the disk is full")
    filler.unlink()
    producer.run(2.0)
    # Nothing more comes: within max_file_seconds every file is closed, traffic or not.
    time.sleep(1.0)
    wait_until(lambda: not unfinished(small_tmpfs), 20, "every usage file closed")
    time.sleep(0.5)
    written, lost = usage_counts(proxy)
    proxy.stop()  # SIGTERM: flushes and closes what is left (nothing, here)

    assert unfinished(small_tmpfs) == [], "unfinished files left after SIGTERM"
    rows = requests = 0
    for path in sorted(small_tmpfs.rglob(f"*.{sink}")):
        if sink == "parquet":
            table = pq.read_table(path)  # raises on a file without its footer
            rows += table.num_rows
            requests += sum(table.column("requests").to_pylist()) if records == "aggregate" else table.num_rows
        else:
            lines = path.read_text().splitlines()
            parsed = [json.loads(line) for line in lines]  # a glued line does not parse
            rows += len(parsed)
            requests += len(parsed)
    assert rows == written, f"{rows} rows readable in files, {written} counted written"
    # Every request the proxy recorded is in a readable file or counted lost, exactly.
    assert requests + lost == producer.sent, (
        f"{requests} requests in files + {lost} counted lost != {producer.sent} sent ({written} rows written)"
    )
    assert lost > 0, "the disk was full: something must have been lost"
    assert "usage sink failing" in proxy.log_text(), "no warning while the disk was full"
    assert "usage sink writing again" in proxy.log_text(), "no word when the disk had room again"
