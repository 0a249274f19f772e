"""Writing ICL results: a results JSON, markdown tables (tasks, gauntlet) and per-example jsonl."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from foundry.eval.gauntlet import gauntlet_markdown
from foundry.rundir import layout

__all__ = ["results_markdown", "write_report"]


def _fmt(v: float) -> str:
    return "n/a" if isinstance(v, float) and math.isnan(v) else f"{v:.4f}"


# `results`: TaskResult objects
def results_markdown(results: list[Any]) -> str:
    """One row per task (and category): label, type, examples, every metric."""
    lines = ["| task | type | n | metrics |", "|---|---|---|---|"]
    for r in results:
        cells = ", ".join(f"{k}={_fmt(v)}" for k, v in r.metrics.items())
        if getattr(r, "skipped", 0):
            cells += f", skipped={r.skipped}"
        lines.append(f"| {r.label} | {r.task_type} | {r.num_samples} | {cells} |")
        for cat, metrics in r.categories.items():
            n = sum(1 for e in r.examples if str(e.get("category")) == cat)
            cells = ", ".join(f"{k}={_fmt(v)}" for k, v in metrics.items())
            lines.append(f"| {r.label}/{cat} | {r.task_type} | {n} | {cells} |")
    return "\n".join(lines)


def write_report(
    out: Path,
    # TaskResult objects
    results: list[Any],
    *,
    flat: dict[str, Any],
    skipped: list[str],
    gauntlet: dict[str, Any] | None,
) -> None:
    """`icl_results.json`, `icl_results.md` and `icl_examples/<label>_<k>shot.jsonl` under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "metrics": flat,
        "tasks": {
            r.label: {
                "task_type": r.task_type,
                "num_fewshot": r.num_fewshot,
                "num_samples": r.num_samples,
                "seconds": r.seconds,
                "skipped_rows": getattr(r, "skipped", 0),
                "metrics": r.metrics,
                "categories": r.categories,
            }
            for r in results
        },
        "skipped": skipped,
        "gauntlet": gauntlet,
    }
    (out / "icl_results.json").write_text(json.dumps(doc, indent=2, default=str))
    text = "# ICL results\n\n" + results_markdown(results) + "\n"
    if skipped:
        text += "\nSkipped:\n" + "".join(f"- {s}\n" for s in skipped)
    if gauntlet is not None:
        text += "\n## Eval Gauntlet\n\n" + gauntlet_markdown(gauntlet) + "\n"
    (out / layout.ICL_RESULTS).write_text(text)
    ex_dir = out / "icl_examples"
    ex_dir.mkdir(exist_ok=True)
    for r in results:
        name = r.label.replace("/", "_").replace("-shot", "shot")
        with (ex_dir / f"{name}.jsonl").open("w") as f:
            for rec in r.examples:
                f.write(json.dumps(rec, default=str) + "\n")
