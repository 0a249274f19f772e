"""Run-directory fixtures: a two-run sweep in the shape `train.py -m` writes, with a launcher's events."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

STEPS = 30


def metrics_rows(lr: float, *, nan_at: int | None = None) -> list[dict[str, float]]:
    """metrics.jsonl records as the trainer logs them: train lines every step, an eval line every 10."""
    rows: list[dict[str, float]] = []
    for s in range(1, STEPS + 1):
        loss = 6.0 * math.exp(-lr * 100 * s / STEPS) + 1.0 + 0.05 * math.sin(s)
        rows.append({
            "step": s, "train/loss": float("nan") if s == nan_at else loss,
            "lr-DecoupledAdamW/group0": lr * min(1.0, s / 5), "throughput/tokens_per_sec": 1000.0 + 37.5 * s,
            "throughput/device/mfu": 0.3 + s / 1000,
        })  # fmt: skip
        if s % 10 == 0:
            rows.append({"step": s, "eval/loss": loss + 0.1, "eval/perplexity": math.exp(loss + 0.1)})
    return rows


def write_run(folder: Path, *, lr: float, nan_at: int | None = None, events: bool = False) -> Path:
    folder.mkdir(parents=True)
    config = {"task": "pretrain", "run_name": "sweep", "optimizer": {"name": "decoupled_adamw", "lr": lr},
              "checkpoint": {"save_folder": "{run_dir}/checkpoints"}}  # fmt: skip
    (folder / "run.json").write_text(json.dumps({"config": config, "derived": {"max_steps": STEPS}}))
    (folder / "config.yaml").write_text("task: pretrain\n")
    rows = metrics_rows(lr, nan_at=nan_at)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "final_metrics.json").write_text(json.dumps(rows[-2]))
    (folder / "train.log").write_text("[foundry] step 1\n[foundry] step 2\n")
    ck = folder / "checkpoints" / f"ep0-ba{STEPS}"
    ck.mkdir(parents=True)
    (ck / "model.pt").write_bytes(b"x" * 1000)
    (ck / "run.json").write_text("{}")  # a file named like a run marker inside checkpoints/: not a run
    (ck / "manifest.json").write_text(json.dumps({"step": STEPS, "files": {"model.pt": {"bytes": 1000}}}))
    icl = folder / "icl" / f"step_{STEPS}"
    icl.mkdir(parents=True)
    gauntlet = {"averages": {"core_average": 0.25}, "categories": {"language": 0.3}}
    (icl / "icl_results.json").write_text(
        json.dumps({"metrics": {"icl/piqa/acc": 0.55}, "gauntlet": gauntlet})
    )
    if events:
        t = 1_700_000_000.0
        lines = [
            {"event": "start", "time": t, "launch_id": "x-1", "pid": 1, "torchrun_options": ["--nproc-per-node=2"],
             "max_restarts": 3, "script": "train.py"},
            {"event": "failure", "time": t + 20, "cause": "exited", "rank": 1, "attempt": 0},
            {"event": "restart", "time": t + 21, "attempt": 1},
            {"event": "resumed", "time": t + 30, "attempt": 1, "resumed_step": 12, "time_lost_s": 9.5},
            {"event": "summary", "time": t + 60, "ok": True, "exit_code": 0, "restarts": 1},
        ]  # fmt: skip
        (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    return folder


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    """`<tmp>/outputs/multirun/sweep/{0_optimizer.lr=0.01,1_optimizer.lr=0.03}` (job 1 restarted once)."""
    base = tmp_path / "outputs" / "multirun" / "sweep"
    write_run(base / "0_optimizer.lr=0.01", lr=0.01, nan_at=7)
    write_run(base / "1_optimizer.lr=0.03", lr=0.03, events=True)
    return base
