"""The dashboard drawn without Grafana (no Grafana binary here): every panel of infra/dashboard.py, its queries run
against a Prometheus as Grafana would send them, drawn as plain SVG on one static HTML page, and that page
screenshotted by headless Chromium (Debian's ``chromium`` through Playwright). The ops tier (tests/ops/test_scrape.py)
draws it after its workload; the picture in docs/dashboard.png is one such run.

    .venv/bin/python infra/render_dashboard.py --prometheus http://127.0.0.1:9090 --namespace ai \\
        --minutes 15 --html /tmp/dashboard.html --png docs/dashboard.png
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.dashboard import ROWS, Panel, as_sent

CHROMIUM = "/usr/bin/chromium"
COLORS = ("#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a", "#ff9830")
PANEL_W, PANEL_H = 1560 / 24, 250  # pixels per grid column, per panel (Grafana's 24 columns, height 8)


class RenderError(Exception):
    """Prometheus unreachable or a query it refused: the page would silently lie, so nothing is drawn."""


@dataclass(frozen=True, kw_only=True)
class Series:
    name: str
    points: tuple[tuple[float, float], ...]  # (unix seconds, value); one point for a table row


@dataclass(frozen=True, kw_only=True)
class Drawn:
    panel: Panel
    series: tuple[Series, ...]


def _api(base: str, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
    url = f"{base.rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            body = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RenderError(f"{url}: {exc}") from exc
    if body.get("status") != "success":
        raise RenderError(f"{params.get('query')}: {body.get('error')}")
    return body["data"]["result"]


def _legend(fmt: str, labels: dict[str, str]) -> str:
    """Grafana's legend format: ``{{label}}`` replaced by the series' value; empty means the label set."""
    if not fmt:
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def collect(base: str, namespace: str, start: float, end: float) -> list[Drawn]:
    """Every panel's queries over [start, end] (a table panel: its instant query at ``end``)."""
    step = str(max(1.0, round((end - start) / 240)))
    drawn = []
    for _, panels in ROWS:
        for panel in panels:
            series: list[Series] = []
            for query in panel.queries:
                expr = as_sent(query.expr, namespace=namespace)
                if panel.kind == "table":
                    result = _api(base, "/api/v1/query", {"query": expr, "time": str(end)})
                    rows = [(r["metric"], ((float(r["value"][0]), float(r["value"][1])),)) for r in result]
                else:
                    params = {"query": expr, "start": str(start), "end": str(end), "step": step}
                    result = _api(base, "/api/v1/query_range", params)
                    rows = [
                        (r["metric"], tuple((float(t), float(v)) for t, v in r["values"])) for r in result
                    ]
                series += [Series(name=_legend(query.legend, m), points=p) for m, p in rows]
            drawn.append(Drawn(panel=panel, series=tuple(series)))
    return drawn


def _number(value: float, unit: str) -> str:
    if unit == "currencyUSD":
        return f"${value:.4g}"
    suffix = {"s": " s", "reqps": "/s"}.get(unit, "")
    return f"{value:.3g}{suffix}"


def _chart(d: Drawn, width: float) -> str:
    """One time series panel as SVG: a line per series on shared axes, min 0 as in infra/dashboard.py."""
    w, h, pad = width - 16, PANEL_H - 90, 44
    finite = [(t, v) for s in d.series for t, v in s.points if v == v and abs(v) != float("inf")]
    if not finite:
        return f'<svg class="chart" width="{w:.0f}" height="{h}"><text x="{w / 2:.0f}" y="{h / 2}">No data</text></svg>'
    t0, t1 = min(t for t, _ in finite), max(t for t, _ in finite)
    top = max(v for _, v in finite) or 1.0

    def x(t: float) -> float:
        return pad + (w - pad - 8) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.5)

    def y(v: float) -> float:
        return 8 + (h - 24) * (1 - v / top)

    parts = [
        f'<line x1="{pad}" y1="{y(0):.1f}" x2="{w - 8:.0f}" y2="{y(0):.1f}" class="axis"/>',
        f'<text x="{pad - 4}" y="{y(top) + 4:.1f}" class="tick">{_number(top, d.panel.unit)}</text>',
        f'<text x="{pad - 4}" y="{y(0) + 4:.1f}" class="tick">0</text>',
        f'<text x="{pad}" y="{h - 2}" class="time">{time.strftime("%H:%M:%S", time.gmtime(t0))}</text>',
        f'<text x="{w - 8:.0f}" y="{h - 2}" class="time end">{time.strftime("%H:%M:%S", time.gmtime(t1))} UTC</text>',
    ]
    for i, s in enumerate(d.series):
        pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in s.points if v == v and abs(v) != float("inf"))
        if pts:
            parts.append(f'<polyline points="{pts}" stroke="{COLORS[i % len(COLORS)]}" class="line"/>')
    return f'<svg class="chart" width="{w:.0f}" height="{h}">{"".join(parts)}</svg>'


def _legend_html(d: Drawn) -> str:
    items = "".join(
        f'<span><i style="background:{COLORS[i % len(COLORS)]}"></i>{html.escape(s.name)}</span>'
        for i, s in enumerate(d.series)
    )
    return f'<div class="legend">{items}</div>'


def _table(d: Drawn) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(s.name)}</td><td>{_number(s.points[-1][1], d.panel.unit)}</td></tr>"
        for s in d.series
    )
    return f'<table class="chart"><tr><th>series</th><th>value</th></tr>{rows or "<tr><td>No data</td></tr>"}</table>'


STYLE = """body{background:#111217;color:#ccccdc;font:13px Inter,Helvetica,Arial,sans-serif;margin:16px;width:1568px}
h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:14px 0 6px;color:#fff}.sub{color:#8e8e9e;margin-bottom:8px}
.row{display:flex;flex-wrap:wrap;gap:0}.panel{box-sizing:border-box;background:#181b1f;border:1px solid #2c3235;
border-radius:3px;margin:0 4px 8px 0;padding:6px 8px;height:250px;overflow:hidden}.panel h3{font-size:13px;margin:0 0 4px}
.axis{stroke:#444}.line{fill:none;stroke-width:1.6}.tick{fill:#8e8e9e;font-size:10px;text-anchor:end}
.time{fill:#8e8e9e;font-size:10px}.end{text-anchor:end}.legend{font-size:11px;max-height:44px;overflow:hidden}
.legend span{margin-right:10px;white-space:nowrap}.legend i{display:inline-block;width:10px;height:3px;margin-right:4px;
vertical-align:middle}table.chart{border-collapse:collapse;font-size:12px;width:100%}table.chart td,table.chart th{
border-bottom:1px solid #2c3235;padding:3px 6px;text-align:left}svg text{fill:#ccccdc}"""


def page(drawn: list[Drawn], *, namespace: str, start: float, end: float) -> str:
    """The static page: rows and panels in the dashboard's order and widths, each panel's ``data-series`` the
    number of series its queries returned (what the ops test checks in the browser)."""
    by_title = {d.panel.title: d for d in drawn}
    body = []
    for row, panels in ROWS:
        cells = []
        for panel in panels:
            d = by_title[panel.title]
            width = PANEL_W * panel.width - 4
            inner = _table(d) if panel.kind == "table" else _chart(d, width) + _legend_html(d)
            cells.append(
                f'<div class="panel" style="width:{width:.0f}px" data-title="{html.escape(panel.title)}" '
                f'data-series="{len(d.series)}"><h3>{html.escape(panel.title)}</h3>{inner}</div>'
            )
        body.append(f'<h2>{html.escape(row)}</h2><div class="row">{"".join(cells)}</div>')
    span = f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(start))} to {time.strftime('%H:%M UTC', time.gmtime(end))}"
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>Conductor</title><style>{STYLE}</style></head>'
        f'<body><h1>Conductor</h1><div class="sub">namespace {html.escape(namespace)}, {span}; drawn by '
        f"infra/render_dashboard.py from the queries of charts/conductor/dashboards/conductor.json</div>"
        f"{''.join(body)}</body></html>"
    )


def screenshot(page_path: Path, png: Path, chromium: str = CHROMIUM) -> None:
    """The whole page as a PNG, by headless Chromium (Playwright driving the system executable)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        try:
            tab = browser.new_page(viewport={"width": 1600, "height": 900})
            tab.goto(page_path.resolve().as_uri())
            png.parent.mkdir(parents=True, exist_ok=True)
            tab.screenshot(path=str(png), full_page=True)
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prometheus", required=True, help="base URL, e.g. http://127.0.0.1:9090")
    parser.add_argument("--namespace", default="ai", help="the dashboard's $namespace")
    parser.add_argument("--minutes", type=float, default=15.0, help="time range ending now")
    parser.add_argument("--html", type=Path, required=True, help="the page to write")
    parser.add_argument("--png", type=Path, help="also screenshot the page here")
    args = parser.parse_args(argv)
    end = time.time()
    start = end - 60 * args.minutes
    try:
        drawn = collect(args.prometheus, args.namespace, start, end)
    except RenderError as exc:
        print(f"render_dashboard: {exc}", file=sys.stderr)
        return 1
    args.html.write_text(page(drawn, namespace=args.namespace, start=start, end=end), encoding="utf-8")
    if args.png is not None:
        screenshot(args.html, args.png)
    print(f"wrote {args.html}" + (f" and {args.png}" if args.png else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
