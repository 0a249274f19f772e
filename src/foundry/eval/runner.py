"""The ICL evaluation API: `load_tasks`, `evaluate_task`, `run_icl_eval`.

Design note: a task config with `num_fewshot: [0, 5]` becomes two `ICLTask`s (`<label>/0-shot`,
`<label>/5-shot`). `evaluate_task` builds the prompts, scores every request in one call (so batching and
KV reuse span the whole task) and turns the scores into metrics and per-example records; `run_icl_eval`
loops over tasks, skips absent data with a message, adds the Eval Gauntlet when configured and writes the
results (`foundry.eval.report`). Metric keys: `icl/<label>/<k>-shot/<metric>`, per category
`icl/<label>/<k>-shot/<category>/<metric>`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from foundry.eval.config import EvalConfig, ICLTaskConfig, default_data_root, load_task_configs, read_yaml_key
from foundry.eval.data import MissingTaskData, load_rows
from foundry.eval.gauntlet import compute_gauntlet, gauntlet_metrics
from foundry.eval.metrics import (
    GEN_ACCURACY,
    LM_ACCURACY,
    LM_ECE,
    MC_ACCURACY,
    MC_ECE,
    exact_match,
    expected_calibration_error,
    mc_confidence,
    mc_predictions,
)
from foundry.eval.progress import TaskProgress
from foundry.eval.prompts import Example, build_prompts
from foundry.eval.report import write_report
from foundry.eval.scorer import generate_greedy, score_requests

__all__ = ["ICLTask", "TaskResult", "evaluate_task", "load_tasks", "model_max_seq_len", "run_icl_eval"]

log = logging.getLogger(__name__)


@dataclass
class ICLTask:
    """One evaluation: a task config at one few-shot count, with its rows loaded."""

    cfg: ICLTaskConfig
    num_fewshot: int
    rows: list[dict[str, Any]]
    max_seq_len: int | None = None
    batch_size: int | None = None
    limit: int | None = None

    @property
    def label(self) -> str:
        """`<label>/<k>-shot`."""
        return f"{self.cfg.label}/{self.num_fewshot}-shot"


@dataclass
class TaskResult:
    """A task's metrics (`metrics`), per-category metrics and per-example records."""

    label: str
    task_type: str
    num_fewshot: int
    metrics: dict[str, float]
    examples: list[dict[str, Any]]
    categories: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0
    skipped: int = 0
    """Rows that could not be scored (a continuation leaving no context token within max_seq_len)."""

    @property
    def num_samples(self) -> int:
        return len(self.examples)


def load_tasks(cfg: EvalConfig, *, skipped: list[str] | None = None) -> list[ICLTask]:
    """One `ICLTask` per (task, few-shot count); tasks with absent data are skipped with a logged message
    (appended to `skipped` when given), or raise when `cfg.skip_missing` is false."""
    out = []
    for task in load_task_configs(cfg):
        try:
            rows = load_rows(task, data_root=cfg.data_root or default_data_root())
        except MissingTaskData as err:
            if not cfg.skip_missing:
                raise
            print(f"[foundry] skipping ICL task: {err}", flush=True)
            if skipped is not None:
                skipped.append(str(err))
            continue
        limit = min(x for x in (task.limit, cfg.limit, len(rows)) if x is not None)
        for k in task.num_fewshot:
            out.append(ICLTask(task, k, rows, task.max_seq_len or cfg.max_seq_len, task.batch_size, limit))
    return out


def model_max_seq_len(model: nn.Module, default: int = 2048) -> int:
    """The model's context length (`max_seq_len`, `n_positions` or `max_position_embeddings`)."""
    config = getattr(model, "config", None)
    for key in ("max_seq_len", "n_positions", "max_position_embeddings"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return default


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _outcomes(
    task: ICLTask, examples: list[Example], scores: list[Any], outputs: list[str]
) -> list[dict[str, Any]]:
    """Per-example records with the fields the metrics read (`correct`, `correct_acc`, ...)."""
    kind, cfg = task.cfg.icl_task_type, task.cfg
    records, pos = [], 0
    for n, ex in enumerate(examples):
        rec: dict[str, Any] = {"index": ex.index, "prompt": ex.prompt}
        if ex.shots:
            # row indices of the few-shot examples, in prompt order
            rec["shots"] = ex.shots
        if ex.category is not None:
            rec["category"] = ex.category
        if kind == "generation_task_with_answers":
            ok, answer = exact_match(
                outputs[n],
                ex.labels,
                stop=ex.stop,
                cot_delimiter=cfg.cot_delimiter,
                normalize=cfg.do_normalization,
            )
            rec.update(output=outputs[n], answer=answer, labels=ex.labels, correct=ok)
        elif kind == "language_modeling":
            s = scores[pos]
            rec.update(
                continuation=ex.choices[0], logprob=s.logprob, num_tokens=s.num_tokens, correct=s.greedy
            )
            rec["confidence"] = s.min_top_prob
        else:
            group = scores[pos : pos + len(ex.requests)]
            lps = [s.logprob for s in group]
            preds = mc_predictions(lps, [s.num_tokens for s in group], ex.choices)
            rec.update(
                gold=ex.gold,
                choices=ex.choices,
                choice_logprobs=lps,
                choice_num_tokens=[s.num_tokens for s in group],
                pred=preds["foundry"],
                pred_acc=preds["acc"],
                pred_acc_norm=preds["acc_norm"],
                correct=preds["foundry"] == ex.gold,
                correct_acc=preds["acc"] == ex.gold,
                correct_acc_norm=preds["acc_norm"] == ex.gold,
                confidence=mc_confidence([s.token_logprobs for s in group], preds["foundry"]),
            )
        pos += len(ex.requests)
        records.append(rec)
    return records


def _metrics(kind: str, records: list[dict[str, Any]]) -> dict[str, float]:
    name = {"language_modeling": LM_ACCURACY, "generation_task_with_answers": GEN_ACCURACY}.get(
        kind, MC_ACCURACY
    )
    out = {name: _mean([float(r["correct"]) for r in records])}
    if kind in ("multiple_choice", "schema"):
        out["acc"] = _mean([float(r["correct_acc"]) for r in records])
        out["acc_norm"] = _mean([float(r["correct_acc_norm"]) for r in records])
    if kind != "generation_task_with_answers":
        ece = LM_ECE if kind == "language_modeling" else MC_ECE
        out[ece] = expected_calibration_error(
            [r["confidence"] for r in records], [r["correct"] for r in records]
        )
    return out


def evaluate_task(
    model: nn.Module,
    # a transformers tokenizer
    tokenizer: Any,
    task: ICLTask,
    *,
    device: torch.device | str,
    batch_size: int,
    pad_to_max_seq_len: bool = False,
    cache_context: bool = True,
    precision: str = "fp32",
    progress: Callable[[int, int], Callable[[int], None]] | None = None,
) -> TaskResult:
    """Evaluates one task on `model`.

    Args:
        model: a causal LM. tokenizer: its tokenizer. task: from `load_tasks`. device: where `model` is.
        batch_size: rows per forward (`task.batch_size` wins when set).
        pad_to_max_seq_len: llm-foundry's reference scoring (every row padded to max_seq_len).
        cache_context: reuse the KV cache of the shared prefix of multiple choice / schema rows.
        precision: fp32, amp_bf16 or amp_fp16.
        progress: `progress(examples, requests)` gives the callback the scorer reports batches to.

    Returns:
        A `TaskResult`; multiple-choice records carry `choice_logprobs` (summed per choice).
    """
    start = time.perf_counter()
    device = torch.device(device)
    max_len = task.max_seq_len or model_max_seq_len(model)
    bs = task.batch_size or batch_size
    kind = task.cfg.icl_task_type
    built = build_prompts(
        task.cfg, task.rows, tokenizer, num_fewshot=task.num_fewshot, max_seq_len=max_len, limit=task.limit
    )
    examples = built.examples
    if built.skipped:
        log.warning(
            "%s: skipped %d of %d rows whose continuation leaves no room for context within max_seq_len=%d "
            "(first: row %d); they are counted as %s/skipped",
            task.label, len(built.skipped), len(built.skipped) + len(examples), max_len, built.skipped[0],
            task.label,
        )  # fmt: skip
    pad = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
    n_requests = (
        len(examples) if kind == "generation_task_with_answers" else sum(len(e.requests) for e in examples)
    )
    report = progress(len(examples), n_requests) if progress is not None else None
    scores: list[Any] = []
    outputs: list[str] = []
    if kind == "generation_task_with_answers":
        by_len: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        # generation stops at max_seq_len tokens in total
        for i, ex in enumerate(examples):
            new = min(ex.max_new_tokens, max_len - len(ex.requests[0].context))
            by_len.setdefault((new, tuple(ex.stop)), []).append(i)
        outputs = [""] * len(examples)
        for (max_new, stop), idxs in by_len.items():
            texts = generate_greedy(
                model, [examples[i].requests[0].context for i in idxs], tokenizer=tokenizer, device=device,
                batch_size=bs, max_new_tokens=max_new, stop=stop, precision=precision,
                pad_to=max_len - max_new if pad_to_max_seq_len else None, progress=report,
            )  # fmt: skip
            for i, text in zip(idxs, texts):
                outputs[i] = text
    else:
        requests: list[Any] = []
        groups: list[list[int]] = []
        for ex in examples:
            groups.append(list(range(len(requests), len(requests) + len(ex.requests))))
            requests.extend(ex.requests)
        scores = score_requests(
            model, requests, device=device, batch_size=bs, pad_id=pad,
            groups=groups if cache_context and kind != "language_modeling" else None,
            pad_to_max_seq_len=max_len if pad_to_max_seq_len else None, precision=precision,
            max_seq_len=max_len, progress=report,
        )  # fmt: skip
    records = _outcomes(task, examples, scores, outputs)
    categories: dict[str, dict[str, float]] = {}
    if task.cfg.has_categories:
        for cat in dict.fromkeys(str(r.get("category")) for r in records):
            categories[cat] = _metrics(kind, [r for r in records if str(r.get("category")) == cat])
    return TaskResult(
        label=task.label,
        task_type=kind,
        num_fewshot=task.num_fewshot,
        metrics=_metrics(kind, records),
        examples=records,
        categories=categories,
        seconds=time.perf_counter() - start,
        skipped=len(built.skipped),
    )


def flat_metrics(result: TaskResult) -> dict[str, float]:
    """`icl/<label>/<k>-shot/<metric>` and `icl/<label>/<k>-shot/<category>/<metric>` scalars, plus
    `icl/<label>/<k>-shot/skipped` (rows that could not be scored) when there are any."""
    out = {f"icl/{result.label}/{k}": v for k, v in result.metrics.items()}
    if result.skipped:
        out[f"icl/{result.label}/skipped"] = result.skipped
    for cat, metrics in result.categories.items():
        out.update({f"icl/{result.label}/{cat}/{k}": v for k, v in metrics.items()})
    return out


def _gauntlet(cfg: EvalConfig, results: list[TaskResult]) -> dict[str, Any] | None:
    if cfg.gauntlet is None:
        return None
    gcfg = (
        read_yaml_key(cfg.gauntlet, "eval_gauntlet") if isinstance(cfg.gauntlet, str | Path) else cfg.gauntlet
    )
    entries: dict[str, Any] = {}
    for r in results:
        # llm-foundry: sub-category evaluators, averaged with equal weight
        if r.categories:
            counts = {c: sum(1 for e in r.examples if str(e.get("category")) == c) for c in r.categories}
            for cat, metrics in r.categories.items():
                entries[f"{r.label}/{cat}"] = {"metrics": metrics, "num_samples": counts[cat]}
        else:
            entries[r.label] = r
    return compute_gauntlet(entries, gcfg)


def _task_progress(
    lines: list[TaskProgress],
    label: str,
    index: int,
    count: int,
    every_s: float,
    emit: Callable[[str], None] | None,
    examples: int,
    requests: int,
) -> TaskProgress:
    """A task's `TaskProgress`, kept in `lines` so its closing line can follow the result."""
    lines.append(
        TaskProgress(
            label, index=index, count=count, examples=examples, requests=requests, every_s=every_s, emit=emit
        )
    )
    return lines[-1]


def run_icl_eval(
    cfg: EvalConfig,
    *,
    model: nn.Module,
    # a transformers tokenizer
    tokenizer: Any,
    device: torch.device | str,
    output_dir: str | Path | None = None,
    emit: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Runs every task of `cfg` (and the gauntlet when configured).

    `emit` receives the progress lines (`foundry.eval.progress`: one every `cfg.progress_interval` seconds
    per task and one when it ends); None prints nothing (ranks other than 0).

    Returns:
        Flat metrics: `icl/<label>/<k>-shot/<metric>` (+ per category) and gauntlet entries
        (`icl/metrics/eval_gauntlet/<name>`). With `output_dir` (or `cfg.output_dir`): writes
        `icl_results.json`, `icl_results.md` and `icl_examples/<label>_<k>shot.jsonl`.
    """
    skipped: list[str] = []
    tasks = load_tasks(cfg, skipped=skipped)
    results = []
    for n, task in enumerate(tasks, 1):
        lines: list[TaskProgress] = []

        progress = partial(_task_progress, lines, task.label, n, len(tasks), cfg.progress_interval, emit)
        res = evaluate_task(
            model, tokenizer, task, device=device, batch_size=cfg.batch_size,
            pad_to_max_seq_len=cfg.pad_to_max_seq_len, cache_context=cfg.cache_context,
            precision=cfg.precision, progress=progress if emit is not None else None,
        )  # fmt: skip
        for line in lines:
            line.finish(res.metrics)
        # the closing progress line says the same (issue 40: each result printed twice)
        if not lines:
            log.info("%s: %s (%.1fs)", res.label, res.metrics, res.seconds)
        results.append(res)
    flat: dict[str, Any] = {}
    for res in results:
        flat.update(flat_metrics(res))
    gauntlet = _gauntlet(cfg, results)
    if gauntlet is not None:
        flat.update(gauntlet_metrics(gauntlet))
    out = output_dir or cfg.output_dir
    if out is not None:
        write_report(Path(out), results, flat=flat, skipped=skipped, gauntlet=gauntlet)
    return flat
