"""report: one self-contained HTML file (styles, data and the drawing script inline; no network).

Three parts a person reads at a glance: usage over time for the top entities (bytes in and out per
second, throttled seconds marked), what-if curves (quota → share of seconds throttled, the token
bucket beside Kafka's sampled rate, the recommendation marked), and the recommendations next to
the current quotas. The charts are SVG drawn by a small inline script from JSON embedded in the
page; each chart says how many marks it drew in its data-drawn attribute.
"""

from __future__ import annotations

import html
import json
import math

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from quotagate.pipeline.rollup import per_entity_topic_second, per_second

TOP_ENTITIES = 6


def report_data(table: DataFrame, whatif: DataFrame, recommendations: pd.DataFrame, top: int = TOP_ENTITIES) -> dict:
    """What the page shows, small enough for the driver: the top entities by bytes moved."""
    seconds = per_second(per_entity_topic_second(table))
    totals = seconds.groupBy("user", "client_id").agg(F.sum(F.col("bytes_in") + F.col("bytes_out")).alias("moved"))
    leaders = totals.orderBy(F.col("moved").desc()).limit(top)
    series = seconds.join(leaders.select("user", "client_id"), ["user", "client_id"]).orderBy("second").toPandas()
    curves = whatif.join(leaders.select("user", "client_id"), ["user", "client_id"]).orderBy("quota").toPandas()
    order = [(r["user"], r["client_id"]) for r in leaders.collect()]
    return {"order": order, "series": series, "curves": curves, "recommendations": recommendations}


def _clean(value: float) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def render_report(data: dict, title: str = "quotagate usage report") -> str:
    series, curves, recommendations = data["series"], data["curves"], data["recommendations"]
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
                "curves": [
                    {
                        "key": key,
                        "quota": rows["quota"].tolist(),
                        "bucket": rows["throttled_share"].tolist(),
                        "kafka": rows["kafka_throttled_share"].tolist(),
                        "recommended": _clean(next(iter(recs[recs["quota_key"] == key]["recommended"].tolist()), None)),
                        "current": _clean(next(iter(recs[recs["quota_key"] == key]["current"].tolist()), None)),
                    }
                    for key, rows in entity_curves.groupby("quota_key", sort=True)
                ],
            }
        )
    table_rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(cell))}</td>"
            for cell in (
                row["user"],
                row["client_id"],
                row["quota_key"],
                _number(row["current"]),
                _number(row["recommended"]),
                _number(row["peak_second"]),
                f"{row['throttled_share_at']:.1%}",
                "yes" if row["met"] else "no",
            )
        )
        + "</tr>"
        for _, row in recommendations.sort_values(["user", "client_id", "quota_key"]).iterrows()
    )
    payload = json.dumps({"entities": entities}).replace("</", "<\\/")
    return PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", payload).replace("__ROWS__", table_rows)


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
<th>peak second</th><th>throttled at the chosen quota</th><th>objective met</th></tr>__ROWS__</table>
<script type="application/json" id="data">__DATA__</script>
<script>
(function () {
  var NS = "http://www.w3.org/2000/svg", W = 420, H = 180, L = 56, B = 24;
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
  data.entities.forEach(function (e) {
    if (!e.seconds.length) return;
    var svg = chart(document.getElementById("usage"), e.name);
    var t0 = e.seconds[0], t1 = Math.max(e.seconds[e.seconds.length - 1], t0 + 1);
    var top = Math.max.apply(null, e.bytes_in.concat(e.bytes_out, [1]));
    var sx = function (s) { return L + (s - t0) / (t1 - t0) * (W - L - 8); };
    var sy = function (v) { return H - B - v / top * (H - B - 8); };
    e.seconds.forEach(function (s, i) {
      if (!e.throttled[i]) return;
      var width = Math.max((W - L) / (t1 - t0), 1);
      el("rect", {x: sx(s), y: 4, width: width, height: H - B - 4, fill: "#d62728", opacity: 0.15}, svg);
    });
    line(svg, e.seconds, e.bytes_in, sx, sy, "#1f77b4");
    line(svg, e.seconds, e.bytes_out, sx, sy, "#ff7f0e");
    label(svg, L - 4, 12, fmt(top)); label(svg, L - 4, H - B, "0");
    label(svg, W - 4, H - 6, (t1 - t0) + " s");
    e.curves.forEach(function (c) {
      var svg2 = chart(document.getElementById("whatif"), e.name + " — " + c.key);
      var q = c.quota.concat(c.recommended ? [c.recommended] : [], c.current ? [c.current] : []);
      var lo = Math.log(Math.min.apply(null, q)), hi = Math.log(Math.max.apply(null, q));
      if (hi - lo < 1e-9) { lo -= 1; hi += 1; }
      var qx = function (v) { return L + (Math.log(v) - lo) / (hi - lo) * (W - L - 8); };
      var qy = function (v) { return H - B - v * (H - B - 8); };
      line(svg2, c.quota, c.kafka, qx, qy, "#9467bd");
      line(svg2, c.quota, c.bucket, qx, qy, "#1f77b4");
      function mark(v, attrs) {
        attrs.x1 = attrs.x2 = qx(v); attrs.y1 = 4; attrs.y2 = H - B;
        el("line", attrs, svg2);
      }
      if (c.recommended) mark(c.recommended, {stroke: "#d62728", "stroke-width": 2});
      if (c.current) mark(c.current, {stroke: "#444", "stroke-dasharray": "4 3"});
      label(svg2, L - 4, 12, "100%"); label(svg2, L - 4, H - B, "0%");
      label(svg2, L, H - 6, fmt(Math.exp(lo)), "start"); label(svg2, W - 4, H - 6, fmt(Math.exp(hi)));
    });
  });
  document.body.setAttribute("data-charts", document.querySelectorAll("svg.chart").length);
})();
</script></body></html>
"""
