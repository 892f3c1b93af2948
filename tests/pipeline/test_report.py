"""The HTML report rendered by headless Chromium (Debian's package): the charts must have drawn."""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import pytest

from quotagate.pipeline.recommend import recommend, with_current
from quotagate.pipeline.report import render_report, report_data
from quotagate.pipeline.synthetic import SyntheticEntity, synthetic_aggregates
from quotagate.pipeline.whatif import whatif
from quotagate.quotas import QuotaEntity, QuotaKey, QuotaTable

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BUCKET_BLUE = (0x1F, 0x77, 0xB4)
KAFKA_PURPLE = (0x94, 0x67, 0xBD)
SCREENSHOT = Path(__file__).resolve().parents[2] / ".cache" / "test-artifacts" / "pipeline-report.png"


def chromium(*args: str) -> str:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail("chromium is not installed: `make chromium` (scripts/ensure_debian_tools.sh) installs it")
    with tempfile.TemporaryDirectory(prefix="quotagate-chromium-") as profile:
        done = subprocess.run(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and the RGB(A) rows of a non-interlaced 8-bit PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, stride, rows, previous = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, up_left = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 0xFF
        rows.append(bytes(line[i] for i in range(stride) if i % channels < 3))
        previous = line
    return width, height, rows


def count_colour(rows: list[bytes], colour: tuple[int, int, int]) -> int:
    target = bytes(colour)
    return sum(row[i : i + 3] == target for row in rows for i in range(0, len(row), 3))


def test_the_report_opens_offline_and_its_charts_draw(spark, tmp_path: Path) -> None:
    entities = [
        SyntheticEntity("ANONYMOUS", "steady", 200_000, 20, quota=150_000),  # its records name its quota
        SyntheticEntity("alice", "bursty", 50_000, 10, burst_every_seconds=60, burst_seconds=5, burst_factor=8),
    ]
    table = synthetic_aggregates(spark, entities, 120).cache()
    results = whatif(table, keys=["producer_byte_rate"]).cache()
    current = QuotaTable({QuotaEntity(None, "bursty"): {QuotaKey.PRODUCER_BYTE_RATE: 120_000}})  # --config
    recommendations = with_current(recommend(results).toPandas(), current)
    page = render_report(report_data(table, results, recommendations))
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    report = tmp_path / "report.html"
    report.write_text(page)

    dom = chromium("--dump-dom", report.as_uri())
    assert 'data-charts="4"' in dom, "2 usage charts and 2 what-if charts"
    assert dom.count('data-drawn="2"') == 4, "every chart drew its two lines"
    assert dom.count("<polyline") == 9, "and steady's quota over time, from its records"
    assert ">produce quota 150kB/s<" in dom and "<td>150,000</td>" in dom and "120,000 (from --config)" in dom
    # axes a reader can read without the legend: clock time, quota ticks in the key's unit, named lines
    assert dom.count(">time (UTC)<") == 2 and ">00:00:00<" in dom and ">00:02:00<" not in dom
    assert ">00:01:59<" in dom, "the last second of the 2 minutes generated from 2026-01-01T00:00:00Z"
    assert dom.count(">quota (B/s); up: share of seconds throttled<") == 2 and ">200k<" in dom
    assert dom.count(">token bucket<") == 2 and dom.count(">Kafka<") == 2 and ">current 150k<" in dom

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    chromium("--window-size=1000,1200", f"--screenshot={SCREENSHOT}", report.as_uri())
    width, height, rows = png_pixels(SCREENSHOT)
    assert (width, height) == (1000, 1200)
    assert count_colour(rows, BUCKET_BLUE) > 500 and count_colour(rows, KAFKA_PURPLE) > 200, f"see {SCREENSHOT}"
    print(f"screenshot: {SCREENSHOT}")


# Client ids that broke the page's script or its template: `<!--<script>` put the HTML parser in its
# "double escaped" script state (no chart drew), `</script>` ends a script element, U+2028/9 end a
# line in old JavaScript, and the template's own placeholders were replaced inside the data.
HOSTILE_IDS = [
    "<!--<script>",
    "</script><script>document.title='pwned'</script>",
    "\u2028\u2029 -->",
    "__ROWS__ __DATA__ __TITLE__",
    "emoji \U0001f600 \"quoted\" back\\slash 'single' &amp; <b>bold</b>",
    "]]> <![CDATA[ <!-- x",
]


def test_every_chart_draws_whatever_the_client_ids(spark, tmp_path: Path) -> None:
    # each in a tenant of the same name (tenant names are the operator's, but are escaped all the same)
    entities = [
        SyntheticEntity("ANONYMOUS" if i % 2 else f"user <{i}>", client_id, 100_000 * (i + 1), 10, tenant=client_id)
        for i, client_id in enumerate(HOSTILE_IDS)
    ]
    table = synthetic_aggregates(spark, entities, 30).cache()
    results = whatif(table, keys=["producer_byte_rate"]).cache()
    recommendations = with_current(recommend(results).toPandas(), None)
    data = report_data(table, results, recommendations)
    report = tmp_path / "report.html"
    report.write_text(render_report(data), encoding="utf-8")

    dom = chromium("--dump-dom", report.as_uri())
    # per entity: its usage over time, and one what-if curve (one key); per tenant: its what-if curve
    charts = len(data["order"]) * 2 + len(data["tenants"])
    assert len(data["order"]) == len(HOSTILE_IDS) and sorted(data["tenants"]["tenant"]) == sorted(HOSTILE_IDS)
    assert f'data-charts="{charts}"' in dom, "the script ran and made every chart"
    assert dom.count('data-drawn="2"') == charts, "every chart drew its two lines"
    assert "<title>quotagate usage report</title>" in dom and "pwned" not in dom.split("</title>")[0]
    assert "<b>bold</b>" not in dom, "a name is text, never markup"
    # the recommendations, the produce by topic (one topic each) and the chargeback: a header and a row per
    # entity; the tenants' usage and recommendations: a header and a row per tenant
    assert dom.count("<table>") == 1 and dom.count("<tr>") == 5 * (1 + len(HOSTILE_IDS))
    assert dom.count('<table class="tenant-usage">') == 1 and "<td>]]&gt; &lt;![CDATA[ &lt;!-- x</td><td>1</td>" in dom
