"""The Eval Gauntlet: ICL accuracies aggregated into category scores and named averages (foundry.md §5.7).

Design note: this is a pure function over finished results, so it is tested on fixed numbers and can be
re-run on a saved results JSON. Semantics follow llm-foundry's `EvalGauntlet`:

* a benchmark is `<name>/<k>-shot`; evaluators split by category (`<name>/<k>-shot/<cat>`) are averaged with
  equal weight into it;
* its score is `acc - random_baseline` when `subtract_random_baseline`, divided by `1 - random_baseline`
  when also `rescale_accuracy` (so chance is 0 and perfect is 1);
* a category is the weighted mean of its benchmarks (weights: `EQUAL` 1, `SAMPLE_SZ` n,
  `LOG_SAMPLE_SZ` max(log2 n, 1)); a category with any benchmark missing is `None`;
* a named average is the plain mean of its categories, `None` if one of them is `None` (llm-foundry instead
  averages the complete categories, 0 when none is: returned as `llmfoundry_averages`).

The `eval_gauntlet:` block's schema (`GauntletConfig`, `CategoryConfig`, `BenchmarkConfig`) is in
`foundry.eval.config` with the `eval` group's other schemas, re-exported here; `gauntlet_config` reads it.

Missing benchmarks (e.g. task files absent from the data root) are listed under `missing` with a warning,
and `partial` carries the same aggregation over the benchmarks that did run, clearly labelled, so a run on
an incomplete data mirror still gives comparable-within-itself numbers.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import Any

from foundry.eval.config import WEIGHTINGS, BenchmarkConfig, CategoryConfig, GauntletConfig

__all__ = [
    "BenchmarkConfig",
    "CategoryConfig",
    "GauntletConfig",
    "WEIGHTINGS",
    "compute_gauntlet",
    "gauntlet_config",
    "gauntlet_metrics",
    "gauntlet_markdown",
]

log = logging.getLogger(__name__)


def gauntlet_config(cfg: Any) -> GauntletConfig:
    """A `GauntletConfig` from a dict / OmegaConf node (an `eval_gauntlet:` key is unwrapped)."""
    if isinstance(cfg, GauntletConfig):
        return cfg
    if not isinstance(cfg, Mapping):
        try:
            from omegaconf import OmegaConf

            cfg = OmegaConf.to_container(cfg, resolve=True)
        except ValueError as err:
            raise TypeError(f"gauntlet config must be a mapping, got {type(cfg).__name__}") from err
    cfg = dict(cfg)
    if "eval_gauntlet" in cfg:
        cfg = dict(cfg["eval_gauntlet"])
    known = {f.name for f in dataclasses.fields(GauntletConfig)}
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError(f"eval_gauntlet: unknown keys {unknown}; known: {sorted(known)}")
    cats = [
        CategoryConfig(name=c["name"], benchmarks=[BenchmarkConfig(**b) for b in c.get("benchmarks") or []])
        for c in cfg.pop("categories", None) or []
    ]
    averages = cfg.pop("averages", None)
    if averages is not None:
        averages = {k: list(v) for k, v in dict(averages).items()}
    return GauntletConfig(categories=cats, averages=averages, **cfg)


def _pick_accuracy(metrics: Mapping[str, Any], label: str) -> float:
    """The evaluator's accuracy: llm-foundry's `*Accuracy*` metric first, else `accuracy`, else `acc`."""
    for key in sorted(metrics):
        if "Accuracy" in key and isinstance(metrics[key], int | float):
            return float(metrics[key])
    for key in ("accuracy", "acc"):
        if isinstance(metrics.get(key), int | float):
            return float(metrics[key])
    raise ValueError(f"result {label!r} has no accuracy metric among {sorted(metrics)}")


def _entry(label: str, value: Any) -> tuple[float, int | None]:
    """(accuracy, number of examples or None) from a float, a metrics dict or a TaskResult-like object."""
    if isinstance(value, int | float):
        return float(value), None
    n = None
    # a TaskResult: .metrics (+ .examples)
    if not isinstance(value, Mapping):
        examples = getattr(value, "examples", None)
        n = getattr(value, "num_samples", None) or (len(examples) if examples is not None else None)
        value = value.metrics
    elif isinstance(value.get("metrics"), Mapping):
        n = value.get("num_samples")
        value = value["metrics"]
    n = value.get("num_samples", n) if n is None else n
    return _pick_accuracy(value, label), (int(n) if n is not None else None)


def _collect(results: Mapping[str, Any]) -> dict[str, tuple[float, int | None]]:
    """Benchmark label `<name>/<k>-shot` -> (accuracy, n); sub-category evaluators averaged equally."""
    groups: dict[str, list[tuple[float, int | None]]] = {}
    for key, value in results.items():
        label = key.removeprefix("icl/metrics/")
        parts = label.split("/")
        if len(parts) < 2 or not parts[1].endswith("-shot"):
            # not an ICL evaluator label (e.g. a gauntlet entry already in the dict)
            continue
        groups.setdefault("/".join(parts[:2]), []).append(_entry(label, value))
    out = {}
    for label, entries in groups.items():
        acc = sum(a for a, _ in entries) / len(entries)
        ns = [n for _, n in entries if n is not None]
        out[label] = (acc, sum(ns) if len(ns) == len(entries) else None)
    return out


def _weight(weighting: str, n: int | None, label: str) -> float:
    if weighting == "EQUAL":
        return 1.0
    if n is None:
        raise ValueError(
            f"weighting={weighting} needs the number of examples of {label!r}; pass results with "
            "`num_samples` (or TaskResult objects), or use weighting: EQUAL"
        )
    return float(n) if weighting == "SAMPLE_SZ" else max(math.log2(n), 1.0)


def _aggregate(
    cfg: GauntletConfig, scores: dict[str, tuple[float, float]], *, partial: bool
) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """(category scores, named averages) from label -> (score, weight)."""
    categories: dict[str, float | None] = {}
    for cat in cfg.categories:
        present = [scores[b.label] for b in cat.benchmarks if b.label in scores]
        if not present or (not partial and len(present) < len(cat.benchmarks)):
            categories[cat.name] = None
            continue
        total = sum(w for _, w in present)
        categories[cat.name] = sum(s * w for s, w in present) / total
    averages: dict[str, float | None] = {}
    for name, cats in cfg.resolved_averages().items():
        vals = [categories[c] for c in cats]
        known = [v for v in vals if v is not None]
        ok = known if partial or len(known) == len(vals) else []
        averages[name] = sum(ok) / len(ok) if ok else None
    return categories, averages


def compute_gauntlet(results: Mapping[str, Any], gauntlet_cfg: Any) -> dict[str, Any]:
    """Aggregates ICL results into the Eval Gauntlet.

    Args:
        results: evaluator label (`<bench>/<k>-shot` or `<bench>/<k>-shot/<category>`, optionally prefixed
            `icl/metrics/`) -> an accuracy float, a metrics dict (optionally `{"metrics": {...},
            "num_samples": n}`) or a TaskResult (`.metrics`, `.examples`). The accuracy is the metric whose
            name contains `Accuracy` (llm-foundry's), else `accuracy`, else `acc`.
        gauntlet_cfg: a `GauntletConfig`, or a dict / OmegaConf node (with or without `eval_gauntlet:`).

    Returns:
        `{"benchmarks": {label: {accuracy, score, random_baseline, weight, num_samples}}, "categories":
        {name: score|None}, "averages": {name: score|None}, "llmfoundry_averages": {name: score}
        (llm-foundry's numbers: the mean of the complete categories, 0 when none is), "missing": [labels],
        "partial": {"categories", "averages"} over the benchmarks present}`; `None` marks a category / average
        with missing input.
    """
    cfg = gauntlet_config(gauntlet_cfg)
    collected = _collect(results)
    benchmarks: dict[str, dict[str, Any]] = {}
    scores: dict[str, tuple[float, float]] = {}
    missing: list[str] = []
    for cat in cfg.categories:
        for bench in cat.benchmarks:
            if bench.label not in collected:
                missing.append(bench.label)
                continue
            acc, n = collected[bench.label]
            score = acc
            if cfg.subtract_random_baseline:
                score -= bench.random_baseline
                if cfg.rescale_accuracy:
                    score /= 1.0 - bench.random_baseline
            weight = _weight(cfg.weighting, n, bench.label)
            scores[bench.label] = (score, weight)
            benchmarks[bench.label] = {
                "category": cat.name,
                "accuracy": acc,
                "score": score,
                "random_baseline": bench.random_baseline,
                "weight": weight,
                "num_samples": n,
            }
    if missing:
        log.warning(
            "eval gauntlet: %d benchmark(s) have no result and their categories are reported as None "
            "(see 'partial' for scores over the benchmarks present): %s",
            len(missing),
            ", ".join(missing),
        )
    categories, averages = _aggregate(cfg, scores, partial=False)
    p_categories, p_averages = _aggregate(cfg, scores, partial=True)
    # llm-foundry drops an incomplete category and averages the rest (0 if none)
    llmfoundry_averages = {}
    for name, cats in cfg.resolved_averages().items():
        complete = [v for c in cats if (v := categories[c]) is not None]
        llmfoundry_averages[name] = sum(complete) / len(complete) if complete else 0.0
    return {
        "benchmarks": benchmarks,
        "categories": categories,
        "averages": averages,
        "llmfoundry_averages": llmfoundry_averages,
        "missing": missing,
        "partial": {"categories": p_categories, "averages": p_averages},
    }


def gauntlet_metrics(
    gauntlet: Mapping[str, Any], prefix: str = "icl/metrics/eval_gauntlet/"
) -> dict[str, float]:
    """Flat loggable scalars (`<prefix><category>`, `<prefix><average>`), complete values only."""
    flat = {**gauntlet["categories"], **gauntlet["averages"]}
    return {f"{prefix}{k}": float(v) for k, v in flat.items() if v is not None}


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def gauntlet_markdown(gauntlet: Mapping[str, Any]) -> str:
    """A markdown table: one row per category and average (complete and over-present-benchmarks)."""
    part = gauntlet["partial"]
    rows = ["| name | score | score (present benchmarks) |", "|---|---|---|"]
    for kind in ("averages", "categories"):
        for name, v in gauntlet[kind].items():
            rows.append(f"| {name} | {_fmt(v)} | {_fmt(part[kind][name])} |")
    if gauntlet["missing"]:
        rows.append("")
        rows.append("Missing benchmarks: " + ", ".join(gauntlet["missing"]))
    return "\n".join(rows)
