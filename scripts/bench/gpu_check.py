"""`make gpu-check`: every GPU check in one command that fits 10 minutes on one H100, as JSON lines.

Each step runs as its own process group under its own time limit (killed at it, silent or not, torchrun's
workers included), and a failing step is one line `{"check": NAME, "ok": false, "rc": ..., "error": ...}` (the
end of its output) after which the next step runs; the exit code is 1 when any step failed. No step runs past
`--total-s` (default 570) from the start: a step's limit is cut to what is left, and a step with under 20 s
left is not run (`"error": "not run: ..."`, counted as failed). The steps' own JSON lines (the speed matrix,
the trainer overhead, the runs' final metrics) pass through as they are printed. Steps, with their limits (seconds):

    test-gpu        pytest -m gpu (tests/test_gpu.py, tests/test_gpu_speed.py)                          150
    matrix          gpu_matrix.py: mpt-1b/125m/350m/3b x eager/compiled/fused/fp8, 50 steps each      budget
    long            gpu_matrix.py: mpt-1b bf16 vs FP8 curves, 200 steps                                   150
    overhead        trainer_overhead.py --gpu: trainer vs bare loop, compiled blocks + chunked loss       100
    fsdp-bf16       train.py, FSDP2 on every local GPU, 2 steps, bf16 (only with --only fsdp-bf16)          60
    fsdp-fast       the same with trainer.compile=blocks, the chunked loss and amp_fp8                     90

The matrix gets what `--total-s` leaves after the later steps' usual time (`EXPECTED_AFTER_MATRIX`); a
configuration starts only if its estimated end is within that budget (a `skipped` line otherwise), sizes in the
order 1b, 125m, 350m, 3b (3b is the one that may not fit); the long run gets its limit as its budget (the FP8
half is skipped, not killed, when it would not fit). `--only NAME ...` runs some steps.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "scripts" / "bench"
TINY_RUN = [
    "model=mpt-125m",
    "parallelism=fsdp",
    "trainer=gpu",
    "trainer.max_duration=2ba",
    "trainer.eval_interval=2ba",
    "trainer.global_train_batch_size=8",
    "trainer.device_train_microbatch_size=4",
    "trainer.eval_subset_num_batches=2",
    "checkpoint=none",
]
RUN_NAMES = {"fsdp-bf16": "gpu-check-fsdp", "fsdp-fast": "gpu-check-fsdp-fast"}
FAST = ["trainer.compile=blocks", "model.loss_fn=chunked_crossentropy", "trainer.precision=amp_fp8"]


def _torchrun(py: str, run_name: str, extra: list[str]) -> list[str]:
    return [py, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={_gpus(py)}",
            str(REPO / "train.py"), *TINY_RUN, *extra, f"run_name={run_name}"]  # fmt: skip


def _gpus(py: str) -> int:
    out = subprocess.run(
        [py, "-c", "import torch; print(torch.cuda.device_count())"], capture_output=True, text=True
    )
    return max(1, int(out.stdout.strip() or 1))


OPTIONAL = {"fsdp-bf16"}
"""Steps run only when `--only` names them (the bf16 2-step run is covered by test-gpu's train.py test; its
minute goes to the matrix)."""
EXPECTED_AFTER_MATRIX = {"long": 110, "overhead": 60, "fsdp-bf16": 40, "fsdp-fast": 60}
"""Seconds each later step usually takes on one H100: what the matrix leaves them."""


def steps(py: str) -> list[tuple[str, list[str], float]]:
    """(name, command, time limit) of every check, in order; the matrix's command gets its budget at run time."""
    return [
        (
            "test-gpu",
            [
                py,
                "-m",
                "pytest",
                "-m",
                "gpu",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/test_gpu.py",
                "tests/test_gpu_speed.py",
            ],
            150,
        ),  # fmt: skip
        (
            "matrix",
            [py, str(BENCH / "gpu_matrix.py"), "--sizes", "mpt-1b", "mpt-125m", "mpt-350m", "mpt-3b"],
            0,
        ),
        (
            "long",
            [py, str(BENCH / "gpu_matrix.py"), "--sizes", "--long-steps", "200", "--long-size", "mpt-1b"],
            150,
        ),
        (
            "overhead",
            [
                py,
                str(BENCH / "trainer_overhead.py"),
                "--gpu",
                "--compile",
                "blocks",
                "--loss-fn",
                "chunked_crossentropy",
                "--steps",
                "20",
            ],
            100,
        ),  # fmt: skip
        ("fsdp-bf16", _torchrun(py, RUN_NAMES["fsdp-bf16"], []), 60),
        ("fsdp-fast", _torchrun(py, RUN_NAMES["fsdp-fast"], FAST), 90),
    ]


def final_metrics(name: str) -> dict | None:
    path = REPO / "outputs" / name / "final_metrics.json"
    return json.loads(path.read_text()) if path.exists() else None


def _kill_group(proc: subprocess.Popen, fired: threading.Event | None = None) -> None:
    """SIGKILL to the step's own process group (start_new_session): torchrun's workers too."""
    if fired is not None:
        fired.set()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # the group is gone
        pass


def run_step(name: str, command: list[str], limit: float) -> bool:
    """Runs one check, passing its output through; one JSON line with its outcome. True when it passed."""
    start = time.monotonic()
    tail: list[str] = []
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    fired = threading.Event()
    timer = threading.Timer(limit, _kill_group, (proc, fired))  # fires even while the step prints nothing
    timer.start()
    try:
        for line in proc.stdout:
            print(line, end="", flush=True)
            tail = (tail + [line.rstrip()])[-12:]
        rc = proc.wait()
    finally:
        timer.cancel()
        _kill_group(proc)  # nothing of a finished step outlives it
    seconds = round(time.monotonic() - start, 1)
    timed_out = fired.is_set()
    rc = 124 if timed_out else rc
    ok = rc == 0 or (name == "test-gpu" and rc == 5)  # 5: no GPU test selected
    row: dict = {"check": name, "ok": ok, "rc": rc, "seconds": seconds}
    if timed_out:
        row["error"] = f"stopped at its {limit:.0f} s limit"
    elif not ok:
        row["error"] = " | ".join(x for x in tail if x)[-1500:]
    if name in RUN_NAMES and ok:
        row["final_metrics"] = final_metrics(RUN_NAMES[name])
    print(json.dumps(row), flush=True)
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--only", nargs="+", help="run these steps only")
    p.add_argument(
        "--total-s", type=float, default=570.0, help="the whole check's time (the matrix gets the rest)"
    )
    args = p.parse_args()
    start = time.monotonic()
    for name in RUN_NAMES.values():
        shutil.rmtree(REPO / "outputs" / name, ignore_errors=True)
    env_line = {"check": "start", "python": args.python, "pythonpath": os.environ.get("PYTHONPATH", "")}
    print(json.dumps(env_line), flush=True)
    results = []
    wanted = set(args.only) if args.only else {name for name, _, _ in steps(args.python)} - OPTIONAL
    for name, cmd, limit in steps(args.python):
        if name not in wanted:
            continue
        left = args.total_s - (time.monotonic() - start)
        if name == "matrix":  # what is left after the later steps' usual time; a config starts only within it
            later = sum(v for k, v in EXPECTED_AFTER_MATRIX.items() if k in wanted)
            budget = max(30.0, left - later)
            cmd, limit = [*cmd, "--budget-s", str(int(budget))], budget + 60
        limit = min(limit, left)
        if name == "long":
            cmd = [*cmd, "--budget-s", str(int(limit - 15))]
        if limit < 20:
            row = {
                "check": name,
                "ok": False,
                "error": f"not run: {left:.0f} s left of --total-s {args.total_s:.0f}",
            }
            print(json.dumps(row), flush=True)
            results.append(False)
            continue
        results.append(run_step(name, cmd, limit))
    print(
        json.dumps({"check": "done", "passed": sum(results), "failed": len(results) - sum(results)}),
        flush=True,
    )
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
