"""Draws the benchmark plots of docs/benchmarks.md as SVG files under docs/assets/bench/.

Design note: the plots come from the same numbers as the page, never typed twice: the GPU plots from the raw
lines of `make gpu-check` (scripts/bench/results/*.jsonl: the matrix's MFU, the 200-step bf16 and FP8 loss
curves, the attention kernels' times), and the streaming plot from the page's own table of ours vs
mosaicml-streaming. The SVG is written by hand (no plotting library in the dev set) and is byte-for-byte the
same on every run, so tests/docs/test_generated_pages.py can compare the committed files with a fresh run.

    python scripts/docs/gen_bench_plots.py [--out docs/assets/bench]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from html import escape
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "scripts" / "bench" / "results" / "h100-2026-11-27.jsonl"
PAGE = REPO / "docs" / "benchmarks.md"
OUT = REPO / "docs" / "assets" / "bench"
COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2"]
SIZES = ["mpt-125m", "mpt-350m", "mpt-1b", "mpt-3b"]
CONFIGS = {
    "compiled": "compiled, flash",
    "cudnn": "compiled, cuDNN",
    "cudnn@x2": "cuDNN, 2x micro-batch",
    "fp8-cudnn": "+ FP8",
    "fp8-cudnn@x2": "FP8, 2x micro-batch",
}


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" font-family="sans-serif" font-size="12">'
    )
    return "\n".join(
        [
            head,
            f"<title>{escape(title)}</title>",
            f'<rect width="{width}" height="{height}" fill="white"/>',
            f'<text x="{width / 2:.0f}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
            *body,
            "</svg>",
            "",
        ]
    )


def _legend(names: list[str], x: float, y: float) -> list[str]:
    out = []
    for i, name in enumerate(names):
        out.append(f'<rect x="{x:.1f}" y="{y + i * 16:.1f}" width="10" height="10" fill="{COLOURS[i]}"/>')
        out.append(f'<text x="{x + 14:.1f}" y="{y + i * 16 + 9:.1f}">{escape(name)}</text>')
    return out


def _nice_top(value: float) -> float:
    """The smallest 4 x (1, 2, 2.5 or 5 x 10^k) at or above `value`: round numbers on the 4 grid lines."""
    magnitude = 10 ** math.floor(math.log10(value / 4))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if 4 * m * magnitude >= value)
    return 4 * step


def grouped_bars(
    groups: list[str],
    series: list[str],
    values: dict[tuple[str, str], float],
    *,
    title: str,
    unit: str,
    fmt: str,
) -> str:
    """Vertical bars: one group per x label, one bar per series (a missing value leaves a gap)."""
    width, height, left, top, bottom, legend_w = 760, 340, 50, 36, 40, 170
    plot_w, plot_h = width - left - legend_w - 10, height - top - bottom
    top_value = _nice_top(max(values.values()) * 1.1)
    body = [f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#333"/>']
    for k in range(5):
        v = top_value * k / 4
        y = top + plot_h - plot_h * k / 4
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        body.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{v:{fmt}}</text>')
    body.append(
        f'<text x="14" y="{top + plot_h / 2:.0f}" transform="rotate(-90 14 {top + plot_h / 2:.0f})" '
        f'text-anchor="middle">{escape(unit)}</text>'
    )
    group_w = plot_w / len(groups)
    bar_w = group_w * 0.8 / len(series)
    for g, group in enumerate(groups):
        x0 = left + g * group_w + group_w * 0.1
        for s, name in enumerate(series):
            value = values.get((group, name))
            if value is None:
                continue
            h = plot_h * value / top_value
            x, y = x0 + s * bar_w, top + plot_h - h
            body.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w - 1:.1f}" height="{h:.1f}" fill="{COLOURS[s]}">'
                f"<title>{escape(group)}, {escape(name)}: {value:{fmt}}</title></rect>"
            )
        cx = left + g * group_w + group_w / 2
        body.append(f'<text x="{cx:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{escape(group)}</text>')
    body += _legend(series, width - legend_w + 5, top + 4)
    return _svg(width, height, body, title)


def lines(curves: dict[str, list[float]], *, step: int, title: str, unit: str) -> str:
    """A line per curve; point i is at step i * `step`."""
    width, height, left, top, bottom, legend_w = 760, 320, 50, 36, 40, 130
    plot_w, plot_h = width - left - legend_w - 10, height - top - bottom
    n = max(len(c) for c in curves.values())
    hi = max(max(c) for c in curves.values())
    body = [f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#333"/>']
    for k in range(5):
        y = top + plot_h - plot_h * k / 4
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        body.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{hi * k / 4:.1f}</text>')
    for k in range(0, n, max(1, (n - 1) // 5)):
        x = left + plot_w * k / (n - 1)
        body.append(f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{k * step}</text>')
    body.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 6}" text-anchor="middle">step</text>'
        f'<text x="14" y="{top + plot_h / 2:.0f}" transform="rotate(-90 14 {top + plot_h / 2:.0f})" '
        f'text-anchor="middle">{escape(unit)}</text>'
    )
    for i, curve in enumerate(curves.values()):
        points = " ".join(
            f"{left + plot_w * k / (n - 1):.1f},{top + plot_h - plot_h * v / hi:.1f}"
            for k, v in enumerate(curve)
        )
        body.append(f'<polyline points="{points}" fill="none" stroke="{COLOURS[i]}" stroke-width="2"/>')
    body += _legend(list(curves), width - legend_w + 5, top + 4)
    return _svg(width, height, body, title)


def hbars(rows: list[tuple[str, float]], *, title: str, unit: str) -> str:
    """Horizontal bars, one per labelled row, with the value at the bar's end."""
    left, right, top, row_h = 360, 60, 36, 24
    width, height = 760, top + row_h * len(rows) + 30
    plot_w = width - left - right
    hi = max(v for _, v in rows)
    body = []
    for i, (label, value) in enumerate(rows):
        y = top + i * row_h
        w = plot_w * value / hi
        body.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end">{escape(label)}</text>')
        body.append(
            f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row_h - 8}" fill="{COLOURS[0]}"/>'
        )
        body.append(f'<text x="{left + w + 4:.1f}" y="{y + 15}">{value:g}x</text>')
    body.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 8}" text-anchor="middle">{escape(unit)}</text>'
    )
    return _svg(width, height, body, title)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def gpu_plots(records: list[dict]) -> dict[str, str]:
    mfu = {
        (r["case"].removeprefix("mpt-"), CONFIGS[r["config"]]): 100 * r["mfu_vs_bf16_peak"]
        for r in records
        if r.get("steps") == 30 and r.get("config") in CONFIGS and "mfu_vs_bf16_peak" in r
    }
    (long_run,) = [r for r in records if "long_run" in r]
    sdpa = {
        (r["case"].removeprefix("mpt-"), name): r[key]["ms"]
        for r in records
        if "shape" in r
        for key, name in (("flash", "flash"), ("cudnn", "cuDNN"), ("efficient", "memory-efficient"))
    }
    sizes = [s.removeprefix("mpt-") for s in SIZES]
    return {
        "gpu-mfu.svg": grouped_bars(
            sizes,
            list(CONFIGS.values()),
            mfu,
            title="MFU on one H100 (30 steps, seq 2048, bf16 peak)",
            unit="MFU (%)",
            fmt=".0f",
        ),  # fmt: skip
        "fp8-loss.svg": lines(
            {"bf16": long_run["bf16_curve_every_10"], "FP8 (tensorwise)": long_run["fp8_curve_every_10"]},
            step=10,
            title="mpt-1b, 200 steps: training loss, bf16 vs FP8",
            unit="loss",
        ),  # fmt: skip
        "attention.svg": grouped_bars(
            sizes,
            ["flash", "cuDNN", "memory-efficient"],
            sdpa,
            title="Causal attention, forward + backward (lower is better)",
            unit="ms",
            fmt=".1f",
        ),  # fmt: skip
    }


def streaming_rows(page: str) -> list[tuple[str, float]]:
    """(case, ratio) from the page's table of ours vs mosaicml-streaming (rows whose ratio ends in `x`)."""
    table = page.split("| case (StreamingDataset", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"([\d.]+)x", cells[-1])
        if match:
            label = re.sub(r"\s*\([^)]*\)", "", cells[0]).replace("`", "").strip(" ,")
            label = label if len(label) <= 46 else label[:45].rstrip() + "…"
            rows.append((label, float(match.group(1))))
    return rows


def render() -> dict[str, str]:
    plots = gpu_plots(_records(RESULTS))
    plots["streaming-read.svg"] = hbars(
        streaming_rows(PAGE.read_text()),
        title="StreamingDataset vs mosaicml-streaming 0.13.0 (2-core CPU)",
        unit="ours / mosaicml-streaming (higher is better)",
    )
    return plots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the folder to write (default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (args.out / name).write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
