"""report: one self-contained HTML file (styles, data and the drawing script inline; no network).

Five parts a person reads at a glance: usage over time for the top entities (bytes in and out per
second, throttled seconds marked), what-if curves (quota → share of seconds throttled, the token
bucket beside Kafka's sampled rate, the recommendation marked), the recommendations next to the
current quotas (the quota the records say was in force) with, at that quota, the replay's
prediction beside what the proxy recorded (or, for a shadow quota, observed), and the top entities'
produce topic by topic (the topics a proxy did not name, beyond its usage.topics_per_entity, in a
row that says so), and the chargeback over the records' whole span (each entity's share of the
cluster's bytes, request time and mutations, and with rates its costs: chargeback.py), and per tenant
(its members' usage summed and its peaks, its what-if curves, its recommendations). The charts
are SVG drawn by a small inline script from JSON embedded in the page; each chart says how many
lines it drew in its data-drawn attribute. Every axis is labelled (clock time in UTC, quota ticks in
the key's unit) and every line is named at its end, so no colour needs the legend.
"""

from __future__ import annotations

import html
import json
import math
import operator
import re
from functools import reduce

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from quotagate.pipeline.chargeback import MEASURES, Rates, chargeback, ordered
from quotagate.pipeline.recommend import entity_rows, tenant_rows
from quotagate.pipeline.rollup import ENTITY, TOPIC, per_entity_topic_second, per_second, per_tenant_second

TOP_ENTITIES = 6
TOP_TOPICS = 5  # per entity; the rest of its named topics in one row
TOP_TENANTS = 20  # tenants with charts and rows in the page, by bytes moved
# A tenant's usage in the report: the amount each quota key charges (whatif.AMOUNT_COLUMN), summed
# over its members, in total and at its peak second.
TENANT_USAGE = MEASURES
TOP_CHARGEBACK = 50  # rows of the chargeback table; the whole of it is `quotagate pipeline chargeback`'s
NO_TENANT = "(none declared)"
OTHER_TOPICS_LABEL = "topics the proxy did not name (beyond its usage.topics_per_entity), summed"
# The unit each quota key is in, everywhere the report prints one (request_percentage: of one thread).
UNITS = {
    "producer_byte_rate": "B/s",
    "consumer_byte_rate": "B/s",
    "request_percentage": "%",
    "controller_mutation_rate": "partitions/s",
}


def report_data(
    table: DataFrame,
    whatif: DataFrame,
    recommendations: pd.DataFrame,
    top: int = TOP_ENTITIES,
    rates: Rates | None = None,
) -> dict:
    """What the page shows, small enough for the driver: the top entities by bytes moved, and the
    chargeback of the whole span (with costs when `rates` are given)."""
    by_entity_topic = per_entity_topic_second(table).cache()  # one pass over the records for both views
    try:
        seconds = per_second(by_entity_topic)
        moved = seconds.groupBy(*ENTITY).agg(F.sum(F.col("bytes_in") + F.col("bytes_out")).alias("moved"))
        leaders = moved.orderBy(F.col("moved").desc(), *ENTITY).limit(top).collect()
        order = [(row["user"], row["client_id"]) for row in leaders]
        # the leaders named in each query, not joined: each would compute them again
        each = ((F.col("user") == user) & (F.col("client_id") == client_id) for user, client_id in order)
        leading = reduce(operator.or_, each, F.lit(False))
        series = seconds.where(leading).orderBy("second").toPandas()
        # The byte-rate quotas in force, per second, as the records name them (null: unlimited, unknown)
        in_force = (
            table.where(leading)
            .groupBy(*ENTITY, F.floor(F.col("ts") / 1000).cast("long").alias("second"))
            .agg(
                F.max("quota_producer_byte_rate").alias("producer_quota"),
                F.max("quota_consumer_byte_rate").alias("consumer_quota"),
            )
            .toPandas()
        )
        curves = whatif.where(leading).orderBy("quota").toPandas()
        topics = (
            per_second(by_entity_topic.where(leading), by_topic=True)
            .groupBy(*ENTITY, *TOPIC)
            .agg(F.sum("bytes_in").alias("bytes_in"))
            .toPandas()
        )
        tenants = (
            per_tenant_second(by_entity_topic)
            .groupBy("tenant")
            .agg(
                F.max("members").alias("members"),
                F.count(F.lit(1)).alias("active_seconds"),
                F.sum("throttled").alias("seconds_throttled"),
                *(F.sum(name).alias(name) for name in TENANT_USAGE),
                *(F.max(name).alias(f"{name}_peak") for name in TENANT_USAGE),
            )
            .orderBy((F.col("bytes_in") + F.col("bytes_out")).desc(), "tenant")
            .limit(TOP_TENANTS)
            .toPandas()
        )
        tenant_curves = (
            whatif.where(F.col("tenant").isin(*tenants["tenant"].tolist())).orderBy("quota").toPandas()
            if "tenant" in whatif.columns and len(tenants)
            else curves[:0]
        )
    finally:
        by_entity_topic.unpersist()
    series = series.merge(in_force, on=[*ENTITY, "second"], how="left")
    shares = ordered(chargeback(table, rates, period="all").toPandas())
    return {
        "order": order,
        "series": series,
        "curves": curves,
        "recommendations": recommendations,
        "topics": topics,
        "chargeback": shares,
        "tenants": tenants,
        "tenant_curves": tenant_curves,
    }


def topic_rows(topics: pd.DataFrame, top: int = TOP_TOPICS) -> list[tuple[str, int]]:
    """One entity's produce by topic (its rows of report_data's "topics"), as the page lists it:
    (what, bytes in) for its `top` topics by bytes in, the rest of its named topics in one row, the
    topics the proxy did not name in another; the rows sum to the entity's produce bytes."""
    named = topics[~topics["other_topics"]].sort_values(["bytes_in", "topic"], ascending=[False, True])
    rows = [(str(row["topic"]), int(row["bytes_in"])) for _, row in named.head(top).iterrows()]
    if len(named) > top:
        rows.append((f"{len(named) - top} more topics", int(named["bytes_in"].iloc[top:].sum())))
    other = topics[topics["other_topics"]]
    if len(other):
        rows.append((OTHER_TOPICS_LABEL, int(other["bytes_in"].sum())))
    return rows


def _clean(value: float) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _curves(rows: pd.DataFrame, recs: pd.DataFrame) -> list[dict]:
    """The what-if curves of one entity or tenant (its rows of whatif, its recommendations): per key
    (a tenant member's row at no own quota is a point of no curve)."""
    rows = rows[rows["quota"].notna()]
    return [
        {
            "key": key,
            "quota": by_key["quota"].tolist(),
            "bucket": by_key["throttled_share"].tolist(),
            "kafka": by_key["kafka_throttled_share"].tolist(),
            "recommended": _clean(next(iter(recs[recs["quota_key"] == key]["recommended"].tolist()), None)),
            "current": _clean(next(iter(recs[recs["quota_key"] == key]["current"].tolist()), None)),
            "unit": UNITS.get(key, ""),
        }
        for key, by_key in rows.groupby("quota_key", sort=True)
    ]


def render_report(data: dict, title: str = "quotagate usage report") -> str:
    series, curves = data["series"], data["curves"]
    recommendations = entity_rows(data["recommendations"])
    if "tenant" in curves:
        curves = curves[curves["tenant"].isna()]
    entities = []
    for user, client_id in data["order"]:
        mine = series[(series["user"] == user) & (series["client_id"] == client_id)]
        entity_curves = curves[(curves["user"] == user) & (curves["client_id"] == client_id)]
        recs = recommendations[(recommendations["user"] == user) & (recommendations["client_id"] == client_id)]
        entities.append(
            {
                "name": f"{user} / {client_id}",
                "seconds": mine["second"].astype(int).tolist(),
                "bytes_in": mine["bytes_in"].astype(float).tolist(),
                "bytes_out": mine["bytes_out"].astype(float).tolist(),
                "throttled": mine["throttled"].astype(int).tolist(),
                "quotas": [
                    {"name": name, "values": [_clean(v) for v in mine[column].astype(float).tolist()]}
                    for name, column in (("produce quota", "producer_quota"), ("fetch quota", "consumer_quota"))
                    if column in mine and mine[column].notna().any()
                ],
                "curves": _curves(entity_curves, recs),
            }
        )
    tenants = data.get("tenants", pd.DataFrame({"tenant": []}))
    tenant_recs = tenant_rows(data["recommendations"])
    tenant_curves = data.get("tenant_curves", curves[:0])
    tenant_charts = [
        {
            "name": f"tenant {tenant}",
            "curves": _curves(
                tenant_curves[tenant_curves["tenant"] == tenant], tenant_recs[tenant_recs["tenant"] == tenant]
            ),
        }
        for tenant in tenants["tenant"]
    ]
    table_rows = "".join(
        _row((row["user"], row["client_id"], *_recommendation_cells(row)))
        for _, row in recommendations.sort_values(["user", "client_id", "quota_key"]).iterrows()
    )
    parts = {
        "__TITLE__": html.escape(title),
        "__DATA__": script_json({"entities": entities, "tenants": tenant_charts}),
        "__ROWS__": table_rows,
        "__TENANTS__": _tenant_section(tenants, tenant_recs),
        "__TOPICS__": _topic_table(data["topics"], data["order"]),
        "__CHARGEBACK__": _chargeback_section(data["chargeback"]),
    }
    # One pass over the template: a placeholder's text inside a name is data, never replaced again.
    return _PLACEHOLDER.sub(lambda match: parts[match.group(0)], PAGE)


_PLACEHOLDER = re.compile("__TITLE__|__DATA__|__ROWS__|__TOPICS__|__CHARGEBACK__|__TENANTS__")
# Inside a <script> element the HTML parser looks for `</script`, and `<!--` with `<script` sends it
# into a state where the next `</script>` no longer ends the element; U+2028/9 end a line in older
# JavaScript. JSON may spell every one of these characters as an escape, and then none can occur.
_SCRIPT_UNSAFE = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _row(cells: tuple) -> str:
    return "<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells) + "</tr>"


def _recommendation_cells(row: pd.Series) -> tuple:
    """A recommendation's cells after its owner's: key, current, recommended, peak, throttled share at
    the chosen quota, objective met, and at the current quota the replay beside the records."""
    return (
        f"{row['quota_key']} ({UNITS.get(row['quota_key'], '')})",
        _current(row),
        _number(row["recommended"]),
        _number(row["peak_second"]),
        f"{row['throttled_share_at']:.1%}",
        "yes" if row["met"] else "no",
        *_at_current(row),
    )


TENANT_USAGE_HEADS = ("bytes in", "bytes out", "request time (ms)", "partitions mutated")


def _tenant_section(tenants: pd.DataFrame, recommendations: pd.DataFrame) -> str:
    """Per tenant (its members summed): usage in total and at its peak second, then its recommendations."""
    if tenants.empty:
        return "<p>No usage record names a tenant (none declared in the proxy's [[tenants]]).</p>"
    heads = ["tenant", "members", "active seconds", "seconds throttled"]
    heads += [f"{what}: total / peak second" for what in TENANT_USAGE_HEADS]
    usage = "".join(
        _row(
            (
                row["tenant"],
                int(row["members"]),
                int(row["active_seconds"]),
                int(row["seconds_throttled"]),
                *(f"{row[name]:,.0f} / {row[f'{name}_peak']:,.0f}" for name in TENANT_USAGE),
            )
        )
        for _, row in tenants.iterrows()
    )
    shown_tenants = set(tenants["tenant"])
    recs = recommendations[recommendations["tenant"].isin(shown_tenants)].sort_values(["tenant", "quota_key"])
    rec_rows = "".join(_row((row["tenant"], *_recommendation_cells(row))) for _, row in recs.iterrows())
    return (
        f'<table class="tenant-usage"><tr>{"".join(f"<th>{html.escape(h)}</th>" for h in heads)}</tr>{usage}</table>'
        '<table class="tenant-recommendations"><tr><th>tenant</th><th>quota key</th><th>current</th>'
        "<th>recommended</th><th>peak second</th><th>throttled at the chosen quota</th><th>objective met</th>"
        "<th>at the current quota: seconds throttled, replay / recorded</th>"
        f"<th>time held at the current quota, replay / recorded</th></tr>{rec_rows}</table>"
    )


def _topic_table(topics: pd.DataFrame, order: list[tuple[str, str]]) -> str:
    """The rows of the produce-by-topic table: per entity, topic_rows with each one's share."""
    rows = []
    for user, client_id in order:
        mine = topic_rows(topics[(topics["user"] == user) & (topics["client_id"] == client_id)])
        total = sum(bytes_in for _, bytes_in in mine)
        for what, bytes_in in mine:
            cells = (user, client_id, what, f"{bytes_in:,}", f"{bytes_in / total:.1%}" if total else "–")
            rows.append(_row(cells))
    return "".join(rows)


def _chargeback_section(frame: pd.DataFrame, top: int = TOP_CHARGEBACK) -> str:
    """The chargeback table: its period, then per (tenant, user, client_id) each measure's share of
    the cluster's (and the costs, when the report had rates), the largest first."""
    if frame.empty:
        return "<p>No usage in the records.</p>"
    priced = "cost_total" in frame.columns
    first = frame.iloc[0]
    heads = ["tenant", "user", "client_id", *(f"{name} (share)" for name in MEASURES)]
    if priced:
        heads += [f"cost ({first['currency']})"]
    rows = []
    for _, row in frame.head(top).iterrows():
        cells = [NO_TENANT if pd.isna(row["tenant"]) else row["tenant"], row["user"], row["client_id"]]
        cells += [f"{row[name]:,.0f} ({_share(row[f'{name}_share'])})" for name in MEASURES]
        if priced:
            cells.append(f"{row['cost_total']:,.2f}")
        rows.append(_row(tuple(cells)))
    more = len(frame) - top
    period = f"{first['period_start']} to {first['period_end']} (UTC, both days included)"
    note = f" {more} more rows in the chargeback files." if more > 0 else ""
    rates = (
        f" Rates: {first['price_per_gb_in']:g} per GB in, {first['price_per_gb_out']:g} per GB out, "
        f"{first['price_per_request_second']:g} per request-second ({first['currency']})."
        if priced
        else " No rates given (`--rates`): shares only."
    )
    return (
        f'<p class="period">{html.escape(period)}.{html.escape(rates + note)}</p>'
        f'<table class="chargeback"><tr>{"".join(f"<th>{html.escape(h)}</th>" for h in heads)}</tr>'
        + "".join(rows)
        + "</table>"
    )


def _share(value: float) -> str:
    return "–" if pd.isna(value) else f"{value:.1%}"


def script_json(data: object) -> str:
    """`data` as JSON that can stand inside an HTML <script> element whatever its strings hold."""
    return json.dumps(data, ensure_ascii=False).translate(_SCRIPT_UNSAFE)


def _value(row: pd.Series, name: str) -> object:
    value = row.get(name)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _current(row: pd.Series) -> str:
    """The quota the entity had: shadow or from --config said so, a change mid-run shown."""
    text = _number(row["current"])
    if _value(row, "current_shadow"):
        text += " (shadow)"
    if _value(row, "current_source") == "config":
        text += " (from --config)"
    history = _value(row, "quota_history")
    if history:
        steps = json.loads(history)
        if len(steps) > 1:
            text += "; was " + " → ".join(_number(value) for _, value, _ in steps[:-1])
    return text


def _at_current(row: pd.Series) -> tuple[str, str]:
    """At the current quota: seconds throttled and time held at it, the replay's / the proxy's
    records' (for a shadow quota: what it observed it would have done)."""
    if _value(row, "current_throttled_time_ms") is None:
        return "", ""
    shadow = bool(_value(row, "current_shadow"))
    seconds = _value(row, "current_shadow_seconds_throttled" if shadow else "current_recorded_seconds_throttled")
    held = _value(row, "current_shadow_held_ms" if shadow else "current_recorded_held_ms")
    observed = "observed" if shadow else "recorded"
    replay_seconds = int(row["current_seconds_throttled"])
    replay_held = row["current_throttled_time_ms"] / 1000
    return (
        f"{replay_seconds} s / {observed} {'–' if seconds is None else f'{int(seconds)} s'}",
        f"{replay_held:,.1f} s / {observed} " + ("–" if held is None else f"{held / 1000:,.1f} s"),
    )


def _number(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unlimited"
    return f"{value:,.0f}" if value >= 100 else f"{value:g}"


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}
.grid{display:flex;flex-wrap:wrap;gap:16px}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px}
.card h3{font-size:14px;margin:4px 0}
svg{display:block}
.legend span{margin-right:12px}.in{color:#1f77b4}.out{color:#ff7f0e}.thr{color:#d62728}.kafka{color:#9467bd}
table{border-collapse:collapse;margin-top:8px}td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}
td:nth-child(-n+3),th:nth-child(-n+3){text-align:left}
</style></head><body>
<h1>__TITLE__</h1>
<h2>Usage over time (top entities by bytes)</h2>
<p class="legend"><span class="in">■ bytes in/s</span><span class="out">■ bytes out/s</span>
<span class="thr">■ throttled second</span></p>
<div class="grid" id="usage"></div>
<h2>What if: quota → share of active seconds throttled</h2>
<p class="legend"><span class="in">■ token bucket (quotagate)</span><span class="kafka">■ Kafka sampled rate</span>
<span class="thr">│ recommended</span><span>┆ current</span></p>
<div class="grid" id="whatif"></div>
<h2>Recommendations</h2>
<table><tr><th>user</th><th>client_id</th><th>quota key</th><th>current</th><th>recommended</th>
<th>peak second</th><th>throttled at the chosen quota</th><th>objective met</th>
<th>at the current quota: seconds throttled, replay / recorded</th>
<th>time held at the current quota, replay / recorded</th></tr>__ROWS__</table>
<p>Quotas, peaks and rates are in each key's unit: bytes a second, or percent of one thread for
request_percentage. "Time held at the quota" is the amount charged over it ÷ the quota. For a shadow
quota the second figure is what it observed on live traffic (it never throttled anyone).</p>
<h2>Produce by topic (top entities)</h2>
<table class="topics"><tr><th>user</th><th>client_id</th><th>topic</th><th>bytes in</th>
<th>share of the entity's produce bytes</th></tr>__TOPICS__</table>
<h2>Tenants (members summed)</h2>
__TENANTS__
<p>A tenant's quota is one bucket its members share, beside their own quotas (a member is held by
whichever binds first). Its what-if replays the members' traffic, each member through its own quota
and the tenant's together, against candidate tenant quotas; "recorded" is what the members' records
say (throttled by the tenant's quota or their own). A member's own curves are its entity's, with its
tenant's quota in force.</p>
<div class="grid" id="whatif-tenants"></div>
<h2>Chargeback: shares of the cluster</h2>
__CHARGEBACK__
<p>Bytes in and out, request time (ms) and partitions mutated per tenant and entity, each with its
share of the cluster's total; "(none declared)": records that name no tenant.</p>
<script type="application/json" id="data">__DATA__</script>
<script>
(function () {
  var NS = "http://www.w3.org/2000/svg", W = 440, H = 200, L = 64, B = 30;
  var data = JSON.parse(document.getElementById("data").textContent);
  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(0) + "k";
    return String(Math.round(v * 100) / 100);
  }
  function chart(container, title) {
    var card = document.createElement("div"); card.className = "card";
    var h = document.createElement("h3"); h.textContent = title; card.appendChild(h);
    var svg = el("svg", {width: W, height: H, "class": "chart", "data-drawn": "0"}, card);
    container.appendChild(card);
    el("line", {x1: L, y1: H - B, x2: W - 4, y2: H - B, stroke: "#888"}, svg);
    el("line", {x1: L, y1: 4, x2: L, y2: H - B, stroke: "#888"}, svg);
    return svg;
  }
  function label(svg, x, y, text, anchor) {
    var t = el("text", {x: x, y: y, "font-size": 10, fill: "#555", "text-anchor": anchor || "end"}, svg);
    t.textContent = text;
  }
  function line(svg, xs, ys, sx, sy, color) {
    var points = [];
    for (var i = 0; i < xs.length; i++) points.push(sx(xs[i]).toFixed(1) + "," + sy(ys[i]).toFixed(1));
    if (points.length === 1) points.push(points[0]);
    el("polyline", {points: points.join(" "), fill: "none", stroke: color, "stroke-width": 2}, svg);
    svg.setAttribute("data-drawn", Number(svg.getAttribute("data-drawn")) + 1);
  }
  function clock(s) { return new Date(s * 1000).toISOString().substr(11, 8); }
  function niceTicks(lo, hi) {
    // quota ticks on a log axis: 1, 2, 5 × 10^k inside [lo, hi], at most six
    var ticks = [], k = Math.floor(Math.log10(lo)) - 1;
    for (; Math.pow(10, k) <= hi * 10 && ticks.length < 40; k++) {
      [1, 2, 5].forEach(function (m) { var v = m * Math.pow(10, k); if (v >= lo && v <= hi) ticks.push(v); });
    }
    while (ticks.length > 6) ticks = ticks.filter(function (_, i) { return i % 2 === 0; });
    return ticks;
  }
  function inside(y) { return Math.min(Math.max(y, 14), H - B - 4); }  // a line's name stays in its plot
  function tick(svg, x1, y1, x2, y2) { el("line", {x1: x1, y1: y1, x2: x2, y2: y2, stroke: "#bbb"}, svg); }
  function whatIf(grid, name, c) {
    var svg2 = chart(grid, name + " — " + c.key + " (" + c.unit + ")");
    var q = c.quota.concat(c.recommended ? [c.recommended] : [], c.current ? [c.current] : []);
    var lo = Math.log(Math.min.apply(null, q)), hi = Math.log(Math.max.apply(null, q));
    if (hi - lo < 1e-9) { lo -= 1; hi += 1; }
    var qx = function (v) { return L + (Math.log(v) - lo) / (hi - lo) * (W - L - 8); };
    var qy = function (v) { return H - B - v * (H - B - 8); };
    line(svg2, c.quota, c.kafka, qx, qy, "#9467bd");
    line(svg2, c.quota, c.bucket, qx, qy, "#1f77b4");
    label(svg2, qx(c.quota[0]) + 2, inside(qy(c.bucket[0]) + 11), "token bucket", "start");
    label(svg2, qx(c.quota[0]) + 2, inside(qy(c.kafka[0]) + 24), "Kafka", "start");
    function mark(v, attrs, text, y) {
      attrs.x1 = attrs.x2 = qx(v); attrs.y1 = 4; attrs.y2 = H - B;
      el("line", attrs, svg2);
      var right = qx(v) > W * 0.65;  // near the right edge the name goes to the mark's left
      label(svg2, qx(v) + (right ? -3 : 3), y, text + " " + fmt(v), right ? "end" : "start");
    }
    if (c.recommended) mark(c.recommended, {stroke: "#d62728", "stroke-width": 2}, "recommended", 40);
    if (c.current) mark(c.current, {stroke: "#444", "stroke-dasharray": "4 3"}, "current", 60);
    [0, 0.5, 1].forEach(function (f) {
      tick(svg2, L - 3, qy(f), L, qy(f));
      label(svg2, L - 4, qy(f) + 3, (f * 100) + "%");
    });
    niceTicks(Math.exp(lo), Math.exp(hi)).forEach(function (v) {
      tick(svg2, qx(v), H - B, qx(v), H - B + 3);
      label(svg2, qx(v), H - B + 13, fmt(v), "middle");
    });
    label(svg2, (L + W) / 2, H - 1, "quota (" + c.unit + "); up: share of seconds throttled", "middle");
  }
  data.entities.forEach(function (e) {
    if (!e.seconds.length) return;
    var svg = chart(document.getElementById("usage"), e.name);
    var t0 = e.seconds[0], t1 = Math.max(e.seconds[e.seconds.length - 1], t0 + 1);
    var limits = [];
    e.quotas.forEach(function (q) { q.values.forEach(function (v) { if (v !== null) limits.push(v); }); });
    var top = Math.max.apply(null, e.bytes_in.concat(e.bytes_out, limits, [1]));
    var sx = function (s) { return L + (s - t0) / (t1 - t0) * (W - L - 8); };
    var sy = function (v) { return H - B - v / top * (H - B - 8); };
    var first = true;
    e.seconds.forEach(function (s, i) {
      if (!e.throttled[i]) return;
      var width = Math.max((W - L) / (t1 - t0), 1);
      el("rect", {x: sx(s), y: 4, width: width, height: H - B - 4, fill: "#d62728", opacity: 0.15}, svg);
      if (first) { label(svg, sx(s) + 2, 14, "throttled", "start"); first = false; }
    });
    line(svg, e.seconds, e.bytes_in, sx, sy, "#1f77b4");
    line(svg, e.seconds, e.bytes_out, sx, sy, "#ff7f0e");
    e.quotas.forEach(function (q) {
      // the quota in force as a dashed step line, named with its last value (a change shows as a step)
      var points = [], last = null;
      e.seconds.forEach(function (s, i) {
        var v = q.values[i];
        if (v === null) return;
        points.push(sx(s).toFixed(1) + "," + sy(v).toFixed(1), sx(s + 1).toFixed(1) + "," + sy(v).toFixed(1));
        last = v;
      });
      if (!points.length) return;
      el("polyline", {points: points.join(" "), fill: "none", stroke: "#444", "stroke-dasharray": "4 3"}, svg);
      label(svg, L + 4, inside(sy(last) - 3), q.name + " " + fmt(last) + "B/s", "start");
    });
    var n = e.seconds.length - 1;
    label(svg, W - 6, inside(sy(e.bytes_in[n]) - 3), "in", "end");
    label(svg, W - 6, inside(sy(e.bytes_out[n]) - 3 - (e.bytes_out[n] === e.bytes_in[n] ? 11 : 0)), "out", "end");
    [0, 0.5, 1].forEach(function (f) {
      tick(svg, L - 3, sy(top * f), L, sy(top * f));
      label(svg, L - 4, sy(top * f) + 3, fmt(top * f) + "B/s");
    });
    for (var i = 0; i <= 3; i++) {
      var s = t0 + (t1 - t0) * i / 3;
      tick(svg, sx(s), H - B, sx(s), H - B + 3);
      label(svg, sx(s), H - B + 13, clock(s), i === 0 ? "start" : i === 3 ? "end" : "middle");
    }
    label(svg, (L + W) / 2, H - 1, "time (UTC)", "middle");
    e.curves.forEach(function (c) { whatIf(document.getElementById("whatif"), e.name, c); });
  });
  data.tenants.forEach(function (t) {
    t.curves.forEach(function (c) { whatIf(document.getElementById("whatif-tenants"), t.name, c); });
  });
  document.body.setAttribute("data-charts", document.querySelectorAll("svg.chart").length);
})();
</script></body></html>
"""
