"""Inline SVG line charts and an event timeline for the offline report (no JavaScript library, no network).

Design note: each chart is plain SVG generated here, one `<polyline>` per run. The data stay readable from
the page: every polyline carries `data-run`, `data-metric`, `data-steps` and `data-values` (the values as
`repr` of the floats, so they round-trip exactly), and the `<svg>` carries the axis mapping (`data-x0`,
`data-x1`, `data-y0`, `data-y1` for the data range, `data-left`, `data-top`, `data-width`, `data-height`
for the plot box), so a test can map the drawn `points` back to data and compare them with metrics.jsonl.
Non-finite values (a NaN loss) are not drawn and not listed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

__all__ = ["PALETTE", "Chart", "Point", "line_chart", "timeline"]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
Point = tuple[int, float]
_W, _H, _L, _T, _R, _B = 600, 280, 70, 30, 20, 40
"""Chart size and the plot box margins (left, top, right, bottom), in SVG pixels."""


@dataclass(kw_only=True)
class Chart:
    """A chart: `series` maps a run name to its (step, value) points."""

    title: str
    metric: str
    series: dict[str, list[Point]] = field(default_factory=dict)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def _label(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.2e}"


def _range(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if hi == lo:
        pad = abs(lo) * 0.05 or 1.0
        return lo - pad, hi + pad
    return lo, hi


def line_chart(chart: Chart) -> str:
    """The chart as an `<svg>` element (a "no data" box when no run has a finite point)."""
    series = {r: [(s, v) for s, v in pts if math.isfinite(v)] for r, pts in chart.series.items()}
    series = {r: pts for r, pts in series.items() if pts}
    w, h = _W - _L - _R, _H - _T - _B
    head = f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" class="chart"'
    title = f'<text x="{_L}" y="18" font-size="14" font-weight="bold">{escape(chart.title)}</text>'
    if not series:
        note = (
            f'<text x="{_L}" y="{_T + 20}" font-size="12">no {escape(chart.metric)} in metrics.jsonl</text>'
        )
        return f'{head} data-metric="{escape(chart.metric)}">{title}{note}</svg>'
    x0, x1 = _range([float(s) for pts in series.values() for s, _ in pts])
    y0, y1 = _range([v for pts in series.values() for _, v in pts])
    sx, sy = w / (x1 - x0), h / (y1 - y0)
    parts = [
        f'{head} data-metric="{escape(chart.metric)}" data-x0="{x0!r}" data-x1="{x1!r}" data-y0="{y0!r}" '
        f'data-y1="{y1!r}" data-left="{_L}" data-top="{_T}" data-width="{w}" data-height="{h}">',
        title,
        f'<rect x="{_L}" y="{_T}" width="{w}" height="{h}" fill="#fafafa" stroke="#999"/>',
    ]
    for t in _ticks(y0, y1):
        y = _T + h - (t - y0) * sy
        parts.append(f'<line x1="{_L}" x2="{_L + w}" y1="{y:.2f}" y2="{y:.2f}" stroke="#e3e3e3"/>')
        parts.append(
            f'<text x="{_L - 6}" y="{y + 4:.2f}" font-size="11" text-anchor="end">{_label(t)}</text>'
        )
    for t in _ticks(x0, x1):
        x = _L + (t - x0) * sx
        parts.append(
            f'<text x="{x:.2f}" y="{_T + h + 16}" font-size="11" text-anchor="middle">{t:.0f}</text>'
        )
    parts.append(f'<text x="{_L + w / 2}" y="{_H - 4}" font-size="11" text-anchor="middle">step</text>')
    for i, (run, pts) in enumerate(sorted(series.items())):
        coords = " ".join(f"{_L + (s - x0) * sx:.3f},{_T + h - (v - y0) * sy:.3f}" for s, v in pts)
        color = PALETTE[i % len(PALETTE)]
        parts.append(
            f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.6" '
            f'data-run="{escape(run)}" data-metric="{escape(chart.metric)}" '
            f'data-steps="{",".join(str(s) for s, _ in pts)}" '
            f'data-values="{",".join(repr(v) for _, v in pts)}" points="{coords}"/>'
        )
        # a lone point draws no line: mark it
        if len(pts) == 1:
            cx, cy = coords.split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>')
    parts.append("</svg>")
    return "".join(parts)


_EVENT_COLORS = {"start": "#1f77b4", "failure": "#d62728", "restart": "#ff7f0e", "resumed": "#2ca02c",
                 "summary": "#555555", "stop": "#9467bd", "preempted": "#e377c2", "health": "#bbbbbb",
                 "stacks": "#8c564b"}  # fmt: skip


def timeline(events: list[dict[str, object]], *, run: str) -> str:
    """The run's events as markers on a time axis (seconds since the first event), with a legend."""
    timed = [e for e in events if isinstance(e.get("time"), int | float)]
    if not timed:
        return ""
    t0 = min(float(e["time"]) for e in timed)  # type: ignore[arg-type]
    t1 = max(float(e["time"]) for e in timed)  # type: ignore[arg-type]
    span = (t1 - t0) or 1.0
    w, height = _W + 300 - _L - _R, 70
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w + _L + _R}" height="{height}" class="timeline" '
        f'data-run="{escape(run)}">',
        f'<line x1="{_L}" x2="{_L + w}" y1="30" y2="30" stroke="#999"/>',
        f'<text x="{_L}" y="60" font-size="11">0 s</text>',
        f'<text x="{_L + w}" y="60" font-size="11" text-anchor="end">{span:.1f} s</text>',
    ]
    failed_at = None
    # downtime bands: a failure until the restarted attempt's first step (`resumed`)
    for e in timed:
        if e.get("event") == "failure" and failed_at is None:
            failed_at = float(e["time"])  # type: ignore[arg-type]
        elif e.get("event") == "resumed" and failed_at is not None:
            x0, x1 = (_L + (t - t0) / span * w for t in (failed_at, float(e["time"])))  # type: ignore[arg-type]
            lost = float(e.get("time_lost_s", 0.0))  # type: ignore[arg-type]
            parts.append(
                f'<rect class="downtime" x="{x0:.2f}" y="18" width="{max(x1 - x0, 1):.2f}" height="24" '
                f'fill="#d62728" fill-opacity="0.15"><title>time lost {lost:.1f} s</title></rect>'
            )
            failed_at = None
    for e in timed:
        kind = str(e.get("event"))
        x = _L + (float(e["time"]) - t0) / span * w  # type: ignore[arg-type]
        color = _EVENT_COLORS.get(kind, "#000000")
        r = 4 if kind == "health" else 6
        parts.append(
            f'<circle class="event" data-event="{escape(kind)}" cx="{x:.2f}" cy="30" r="{r}" fill="{color}">'
            f"<title>{escape(kind)} at +{float(e['time']) - t0:.1f} s</title></circle>"  # type: ignore[arg-type]
        )
    parts.append("</svg>")
    legend = " ".join(
        f'<span style="color:{c}">&#9679; {k}</span>' for k, c in _EVENT_COLORS.items()
        if any(e.get("event") == k for e in timed)
    )  # fmt: skip
    return "".join(parts) + f'<div class="legend">{legend}</div>'
