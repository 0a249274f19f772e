"""Reading the report's plotted data back out of its HTML (the file, or a browser's `--dump-dom`)."""

from __future__ import annotations

import json
import math
from html.parser import HTMLParser
from pathlib import Path
from typing import Any


class ReportDom(HTMLParser):
    """Collects every chart `<svg>`, its `<polyline class="series">` children, and the two check elements."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[dict[str, Any]] = []
        self.texts: dict[str, str] = {}
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "svg" and a.get("class") == "chart":
            self.charts.append({**a, "lines": []})
        elif tag == "polyline" and a.get("class") == "series":
            self.charts[-1]["lines"].append(a)
        elif a.get("id") in ("render-check", "foundry-report-data"):
            self._in = a["id"]
            self.texts[self._in] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag in ("pre", "script"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            self.texts[self._in] += data


def parse(html: str) -> ReportDom:
    dom = ReportDom()
    dom.feed(html)
    return dom


def jsonl_points(path: Path, key: str) -> list[tuple[int, float]]:
    """The finite (step, value) points of `key` in a metrics.jsonl, as the report should plot them."""
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if key in rec and math.isfinite(rec[key]):
            out.append((int(rec["step"]), float(rec[key])))
    return out


def line_points(
    chart: dict[str, Any], line: dict[str, str]
) -> tuple[list[tuple[int, float]], list[tuple[float, float]]]:
    """(the data attributes' points, the drawn `points` mapped back to data through the chart's axes)."""
    steps = [int(s) for s in line["data-steps"].split(",")]
    values = [float(v) for v in line["data-values"].split(",")]
    x0, x1, y0, y1 = (float(chart[k]) for k in ("data-x0", "data-x1", "data-y0", "data-y1"))
    left, top, w, h = (float(chart[k]) for k in ("data-left", "data-top", "data-width", "data-height"))
    drawn = []
    for pair in line["points"].split():
        px, py = (float(c) for c in pair.split(","))
        drawn.append((x0 + (px - left) / w * (x1 - x0), y0 + (top + h - py) / h * (y1 - y0)))
    return list(zip(steps, values, strict=True)), drawn


def check_against_metrics(html: str, run_dirs: dict[str, Path]) -> int:
    """Asserts every polyline equals the run's metrics.jsonl (attributes exactly, drawing to 1e-4 of the
    axis range); returns how many points were checked."""
    dom = parse(html)
    checked = 0
    for chart in dom.charts:
        for line in chart["lines"]:
            metric, run = line["data-metric"], line["data-run"]
            key = metric
            if metric.endswith("*"):
                key = next(k for k in json.loads(run_dirs[run].joinpath("metrics.jsonl").read_text().splitlines()[0])
                           if k.startswith(metric[:-1]))  # fmt: skip
            want = jsonl_points(run_dirs[run] / "metrics.jsonl", key)
            data, drawn = line_points(chart, line)
            assert data == want, (metric, run)
            xr = float(chart["data-x1"]) - float(chart["data-x0"])
            yr = float(chart["data-y1"]) - float(chart["data-y0"])
            for (s, v), (dx, dy) in zip(want, drawn, strict=True):
                assert abs(dx - s) <= 1e-4 * xr and abs(dy - v) <= 1e-4 * yr, (metric, run, s, v, dx, dy)
            checked += len(want)
    return checked
