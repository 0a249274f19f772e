"""`runs report RUN|SWEEP`: one self-contained HTML file with the curves,
evals and events of one or more runs.

Design note: the page has no external resource (inline CSS, inline SVG from `foundry.runs.plots`, one small
inline script), so it opens offline and archives as one file. A sweep is a folder holding several runs (a
Hydra multirun dir): their curves are overlaid and the config keys whose values differ between them form
the parameter table. The plotted data are embedded twice for checking: in the SVG attributes and in a JSON
blob (`<script type="application/json" id="foundry-report-data">`); the inline script writes, after the
browser parsed the SVG, how many points each polyline has (`<pre id="render-check">`), so a headless
browser's `--dump-dom` shows what was actually rendered (hidden on the page: it is for tests, not readers).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from html import escape
from pathlib import Path
from typing import Any

from foundry.runs.plots import PALETTE, Chart, Point, line_chart, timeline
from foundry.runs.show import flatten, icl_results, run_overrides
from foundry.runs.state import RunFiles, load_run, summarize
from foundry.runs.store import RunRoot

__all__ = ["CHARTS", "build_report", "labels", "metric_points", "sweep_params", "write_report"]

CHARTS = (
    ("Training loss", "train/loss"),
    ("Eval loss", "eval/loss"),
    ("Learning rate", "lr-*"),
    ("Tokens/s", "throughput/tokens_per_sec"),
    ("MFU (logged when the peak FLOP/s is known: GPU runs)", "throughput/device/mfu"),
)
"""(title, metrics.jsonl key); `lr-*` is the first key starting with `lr-` (one per optimizer group)."""

_CSS = """body{font-family:sans-serif;margin:24px;color:#222;background:#fff}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f0f0f0}.charts{display:flex;flex-wrap:wrap;gap:12px}.legend{font-size:12px;margin-bottom:12px}
h2{margin-top:28px;border-bottom:1px solid #ddd}.swatch{margin-right:14px;font-size:14px}
pre{white-space:pre-wrap;word-break:break-all;font-size:11px}"""
_SCRIPT = """(function(){var out={};document.querySelectorAll('polyline.series').forEach(function(p){
out[p.getAttribute('data-metric')+'|'+p.getAttribute('data-run')]=p.points.numberOfItems;});
document.getElementById('render-check').textContent=JSON.stringify(out);})();"""


def _key(metrics: list[dict[str, Any]], pattern: str) -> str:
    if not pattern.endswith("*"):
        return pattern
    keys = sorted({k for rec in metrics for k in rec if k.startswith(pattern[:-1])})
    return keys[0] if keys else pattern


def metric_points(metrics: list[dict[str, Any]], key: str) -> list[Point]:
    """(step, value) of every metrics.jsonl record that has `key` (finite or not), in file order."""
    return [
        (int(r["step"]), float(r[key]))
        for r in metrics
        if isinstance(r.get("step"), int) and isinstance(r.get(key), int | float)
    ]


def sweep_params(runs: list[RunFiles], overridden: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Config keys whose values differ between the runs (run_name and paths derived from it left out): the
    keys in `overridden` (what the sweep set on the command line) first, then those that followed from
    them."""
    flat = [flatten(r.run.get("config", {})) for r in runs]
    keys = sorted(set().union(*flat)) if flat else []
    skip = ("run_name", "checkpoint.save_folder", "logger.wandb.name")
    differ = [
        k for k in keys if k not in skip and len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1
    ]
    return [k for k in differ if k in overridden] + [k for k in differ if k not in overridden]


def _tokens(short: str) -> tuple[list[str], str]:
    """A run name's parts and their separator: a Hydra job folder `N_<a=1,b=2>` -> its overrides, else the
    `-`/`_`-separated words of the name."""
    head, _, rest = short.partition("_")
    if head.isdigit() and rest:
        return rest.split(","), ","
    return re.split(r"[-_]", short), "-"


def labels(names: list[str]) -> dict[str, str]:
    """Short display names: the part after the runs' common folder and, for several runs, only the parts of
    their names that differ (a Hydra job folder `N_<overrides>` -> the overrides that differ)."""
    parts = [n.split("/") for n in names]
    common = 0
    while len(names) > 1 and all(len(p) > common + 1 and p[common] == parts[0][common] for p in parts):
        common += 1
    shorts = {name: "/".join(p[common:]) or name for name, p in zip(names, parts, strict=True)}
    out = dict(shorts)
    if len(names) > 1:
        split = {name: _tokens(short) for name, short in shorts.items()}
        shared = set.intersection(*(set(tokens) for tokens, _ in split.values()))
        diff = {name: sep.join(t for t in tokens if t not in shared) for name, (tokens, sep) in split.items()}
        if all(diff.values()) and len(set(diff.values())) == len(diff):
            out = diff
    return _clipped(out)


def _clipped(shorts: dict[str, str], width: int = 48) -> dict[str, str]:
    """Each label cut to `width` characters around the part where the labels differ (issue 40: cutting the end
    left two sweep jobs of long names with the same label)."""
    values = list(shorts.values())
    head = len(os.path.commonprefix(values)) if len(values) > 1 else 0
    tail = len(os.path.commonprefix([v[::-1] for v in values])) if len(values) > 1 else 0
    # room for two "..."
    room = width - 6
    out = {}
    for name, short in shorts.items():
        if len(short) <= width:
            out[name] = short
            continue
        start, end = min(head, len(short)), max(len(short) - tail, min(head, len(short)))
        lo = max(0, min(start - 8, len(short) - room)) if end - start <= room else start
        hi = min(len(short), lo + room)
        out[name] = ("..." if lo > 0 else "") + short[lo:hi] + ("..." if hi < len(short) else "")
    return out


def _legend(names: list[str], short: dict[str, str]) -> str:
    items = "".join(
        f'<span class="swatch" style="color:{PALETTE[i % len(PALETTE)]}" title="{escape(n)}">&#9632; '
        f"{escape(short[n])}</span> "
        for i, n in enumerate(sorted(names))
    )
    return f'<div class="legend">{items}</div>'


def _table(head: list[str], rows: list[list[str]], *, cls: str = "") -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><tr>{th}</tr>{body}</table>'


# `v`: any JSON value
def _num(v: Any) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.5g}"
    return "-" if v is None else str(v)


def _overview(runs: list[RunFiles], short: dict[str, str]) -> str:
    head = ["run", "task", "state", "step", "loss", "tokens/s", "restarts", "time lost (s)"]
    rows = []
    for r in runs:
        s = summarize(r)
        rows.append([short[r.name], s.task, s.state, f"{s.step}/{s.max_steps or '?'}", _num(s.loss),
                     _num(s.tokens_per_s), str(s.restarts), f"{s.time_lost_s:.1f}"])  # fmt: skip
    return _table(head, rows, cls="overview")


def _evals(root: RunRoot, runs: list[RunFiles], short: dict[str, str]) -> str:
    out = []
    for r in runs:
        icl = icl_results(root, r.name)
        if not icl:
            continue
        rows = [[k, _num(v)] for k, v in sorted(icl.get("metrics", {}).items())]
        where = f" (step {icl['step']})" if "step" in icl else ""
        out.append(f"<h3>{escape(short[r.name])}{where}</h3>" + _table(["metric", "value"], rows, cls="icl"))
        g = icl.get("gauntlet")
        if g:
            grows = [
                [f"{kind}/{k}", _num(v)] for kind in ("averages", "categories") for k, v in g[kind].items()
            ]
            out.append("<h4>Gauntlet</h4>" + _table(["name", "score"], grows, cls="gauntlet"))
    return "".join(out) or "<p>No ICL results (eval=... during training, or task=eval, writes them).</p>"


def _events(runs: list[RunFiles], short: dict[str, str]) -> str:
    out = []
    for r in runs:
        if not r.events:
            continue
        t0 = min(float(e.get("time", 0.0)) for e in r.events)
        rows = [[f"+{float(e.get('time', t0)) - t0:.1f}", str(e.get("event")),
                 json.dumps({k: v for k, v in e.items() if k not in ("event", "time")}, sort_keys=True)[:300]]
                for e in r.events]  # fmt: skip
        out.append(f"<h3>{escape(short[r.name])}</h3>" + timeline(r.events, run=r.name))
        out.append(_table(["t (s)", "event", "details"], rows, cls="events"))
    return "".join(out) or "<p>No events.jsonl (runs started with python -m foundry.launch record them).</p>"


def build_report(root: RunRoot, names: list[str], *, title: str) -> str:
    """The HTML page for runs `names` under `root` (several: a sweep, curves overlaid)."""
    runs = [load_run(root, n) for n in names]
    data: dict[str, dict[str, list[Point]]] = {r.name: {} for r in runs}
    charts = []
    for chart_title, pattern in CHARTS:
        chart = Chart(title=chart_title, metric=pattern)
        for r in runs:
            key = _key(r.metrics, pattern)
            pts = metric_points(r.metrics, key)
            if pts:
                chart.series[r.name] = pts
                data[r.name][pattern] = [(s, v) for s, v in pts if math.isfinite(v)]
        # no run logged it (e.g. MFU on a CPU): no empty plot
        if chart.series:
            charts.append(line_chart(chart))
    overridden = {
        o.split("=", 1)[0].lstrip("+~") for n in names for o in (run_overrides(root, n) or []) if "=" in o
    }
    params = sweep_params(runs, overridden) if len(runs) > 1 else []
    short = labels(names)
    prow = [[short[r.name], *(_num(flatten(r.run.get("config", {})).get(k)) for k in params)] for r in runs]
    blob = json.dumps({"runs": data, "params": params}).replace("</", "<\\/")
    body = [
        f"<h1>{escape(title)}</h1><p>generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}</p>",
        "<h2>Runs</h2>", _overview(runs, short),
        *(["<h2>Sweep parameters</h2>", _table(["run", *params], prow, cls="params")] if params else []),
        "<h2>Curves</h2>", _legend(names, short),
        f'<div class="charts">{"".join(charts)}</div>',
        "<h2>ICL results</h2>", _evals(root, runs, short),
        "<h2>Event timeline</h2>", _events(runs, short),
        # read by tests from the rendered DOM
        '<pre id="render-check" hidden>(script did not run)</pre>',
        f'<script type="application/json" id="foundry-report-data">{blob}</script>',
        f"<script>{_SCRIPT}</script>",
    ]  # fmt: skip
    head = f'<meta charset="utf-8"><title>{escape(title)}</title><style>{_CSS}</style>'
    return f"<!DOCTYPE html><html><head>{head}</head><body>{''.join(body)}</body></html>\n"


def write_report(root: RunRoot, names: list[str], *, title: str, out: Path) -> Path:
    """Writes `build_report(...)` to `out` (its folder is created); returns `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_report(root, names, title=title), encoding="utf-8")
    return out
