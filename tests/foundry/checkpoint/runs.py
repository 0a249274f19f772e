"""Running `train.py` in subprocesses for checkpoint tests: start, kill -9 at a step, rerun, read results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from tests import dist_launch

REPO = Path(__file__).resolve().parents[3]
TINY = ["experiment=smoke-cpu", "data.corpus_mb=0.15", "data.vocab_size=300", "trainer.progress_bar=false"]


def env_for(cache: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "FOUNDRY_CACHE": str(cache),
        "WANDB_MODE": "offline",
        "HYDRA_FULL_ERROR": "1",
        **extra,
    }
    env.pop("RUN_NAME", None)
    return env


def command(args: list[str], *, torchrun: int = 0) -> list[str]:
    """`train.py` on the tiny setup: under `torchrun --nproc_per_node=<torchrun>` (even 1) if set, else python."""
    launch = dist_launch.torchrun(torchrun) if torchrun else [sys.executable]
    return [*launch, str(REPO / "train.py"), *TINY, *args]


def train(
    args: list[str], cwd: Path, env: dict[str, str], *, torchrun: int = 0, ok: bool = True
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        command(args, torchrun=torchrun), cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    if ok:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def last_step(metrics: Path) -> int:
    if not metrics.exists():
        return 0
    steps = [
        json.loads(line).get("step", 0)
        for line in metrics.read_text().splitlines()
        if line.strip().endswith("}")
    ]
    return max(steps, default=0)


def train_and_kill(args: list[str], cwd: Path, env: dict[str, str], *, metrics: Path, at_step: int) -> int:
    """Starts training and SIGKILLs it once `metrics` shows `at_step`; returns the last step logged before."""
    proc = subprocess.Popen(
        command(args), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        while proc.poll() is None and last_step(metrics) < at_step:
            time.sleep(0.002)
        assert proc.poll() is None, "training finished before it could be killed: raise max_duration"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return last_step(metrics)


def train_rows(metrics: Path) -> list[dict]:
    return [r for r in map(json.loads, metrics.read_text().splitlines()) if "train/loss" in r]


def final_state(ckpt_dir: Path) -> tuple[dict, dict]:
    model = torch.load(ckpt_dir / "model.pt", weights_only=True)
    state = torch.load(ckpt_dir / "state.pt", weights_only=True)
    return model, state["optimizer"]


def assert_same_final_state(ckpt_dir: Path, reference: Path, steps: int) -> None:
    """The checkpoint `ckpt_dir` holds bitwise the model and optimizer of `reference`'s last (`ep0-ba<steps>`)."""
    model, optim = final_state(ckpt_dir)
    ref_model, ref_optim = final_state(reference / "checkpoints" / f"ep0-ba{steps}")
    assert_bitwise_equal(model, ref_model, "model")
    assert_bitwise_equal(optim, ref_optim, "optimizer")


def assert_same_run(run_dir: Path, reference: Path, steps: int) -> None:
    """The run `run_dir` ended as the uninterrupted `reference` run: the same final state, and every step
    1..`steps` logged once, with the reference's losses."""
    assert_same_final_state(run_dir / "checkpoints" / f"ep0-ba{steps}", reference, steps)
    rows = train_rows(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, steps + 1)), "no gap and no duplicate step"
    assert [r["train/loss"] for r in rows] == [
        r["train/loss"] for r in train_rows(reference / "metrics.jsonl")
    ]


def assert_bitwise_equal(a: object, b: object, path: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert set(a) == set(b), path  # type: ignore[arg-type]
        for k in a:
            assert_bitwise_equal(a[k], b[k], f"{path}/{k}")  # type: ignore[index]
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path  # type: ignore[arg-type]
        for i, (x, y) in enumerate(zip(a, b)):  # type: ignore[call-overload]
            assert_bitwise_equal(x, y, f"{path}[{i}]")
    else:
        assert a == b, path
