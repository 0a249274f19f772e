"""`make gpu-check`: every GPU check in one command that fits 10 minutes on one H100, as JSON lines.

Each step runs as its own process group under its own time limit (killed at it, silent or not, torchrun's
workers included), and a failing step is one line `{"check": NAME, "ok": false, "rc": ..., "error": ...}` (the
end of its output) after which the next step runs; the exit code is 1 when any step failed. No step runs past
`--total-s` (default 570) from the start: a step's limit is cut to what is left, and a step with under 20 s
left is not run (`"error": "not run: ..."`, counted as failed). The steps' own JSON lines (the speed matrix,
the attention kernels, the trainer overhead, the runs' final metrics) pass through as they are printed. Steps,
with their limits (seconds):

    (warm)          gpu_warm.py, one process per block graph of the matrix, beside test-gpu          until 240
    test-gpu        pytest -m gpu (tests/test_gpu.py, tests/test_gpu_speed.py)                          300
    matrix          gpu_matrix.py: mpt-1b/125m/350m/3b x `MATRIX_CONFIGS` (what `trainer.speed=auto`    budget
                    runs and its alternatives: cuDNN attention, twice the micro-batch, FP8), 30 steps
                    each; mpt-1b's bf16 and FP8 rows for 200 (their `long_run` line: the loss parity)
    sdpa            sdpa_backends.py: flash vs cuDNN vs memory-efficient attention at each size          60
    overhead        trainer_overhead.py --gpu: trainer vs bare loop, compiled blocks + chunked loss       100
    loss            fused_loss.py --compile: plain vs chunked loss, eager vs compiled math, 125m head       90
                    (only with --only loss: the matrix's rows show the loss options in place)
    fsdp-bf16       train.py, FSDP2 on every local GPU, 2 steps, bf16 (only with --only fsdp-bf16)          60
    fsdp-fast       the same with trainer.compile=blocks, the chunked loss and amp_fp8 (only with          90
                    --only fsdp-fast: its minutes go to the matrix on one GPU)

The matrix gets what `--total-s` leaves after the later steps' usual time (`EXPECTED_AFTER_MATRIX`); a
configuration starts only if its estimated end is within that budget (a `skipped` line otherwise), sizes in the
order 1b, 125m, 350m, 3b (3b is the one that may not fit). Warm-up: compiling a block graph takes 30-80 s
and the matrix needs one per size x attention kernel x FP8 recipe x micro-batch (11 by default), so when the
matrix is to run, `gpu_warm.py` processes compile them into inductor's on-disk caches while the GPU tests run
(compile workers split between them, 4 cores left to the tests; the tests time nothing); the matrix waits for
them until `WARM_UNTIL_S` from the start (stragglers are killed), then finds its graphs in the cache. Their
outcome is one `{"check": "warm", ...}` line, not counted as a step: a failed warm-up only costs the matrix its
own compiles. `--only NAME ...` runs some steps; `--matrix-sizes/--matrix-configs/--matrix-steps/--long-steps`
change the matrix.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

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


OPTIONAL = {"fsdp-bf16", "fsdp-fast", "loss"}
"""Steps run only when `--only` names them (the 2-step runs are covered by test-gpu's train.py tests, the
losses by the matrix's rows; their minutes go to the matrix)."""
EXPECTED_AFTER_MATRIX = {"sdpa": 20, "overhead": 60, "loss": 45, "fsdp-bf16": 40, "fsdp-fast": 60}
"""Seconds each later step usually takes on one H100: what the matrix leaves them."""
MATRIX_SIZES = ["mpt-1b", "mpt-125m", "mpt-350m", "mpt-3b"]
MATRIX_CONFIGS = ["cudnn", "mpt-125m:cudnn@x2", "mpt-350m:cudnn@x2", "fp8-cudnn", "mpt-1b:fp8-cudnn@x2"]
"""The matrix's configurations (`--matrix-configs`; gpu_matrix.py's `[SIZE:]NAME[@N|@xN]`)."""
WARM_UNTIL_S = 240.0
"""The matrix waits for the warm-up at most this long from the start."""


def steps(
    py: str,
    *,
    sizes: list[str] = MATRIX_SIZES,
    configs: list[str] = MATRIX_CONFIGS,
    matrix_steps: int = 30,
    long_steps: int = 200,
) -> list[tuple[str, list[str], float]]:
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
            300,
        ),  # fmt: skip
        (
            "matrix",
            [
                py,
                str(BENCH / "gpu_matrix.py"),
                "--sizes",
                *sizes,
                "--configs",
                *configs,
                "--steps",
                str(matrix_steps),
                "--long-steps",
                str(long_steps),
                "--long-size",
                "mpt-1b",
            ],
            0,
        ),  # fmt: skip
        ("sdpa", [py, str(BENCH / "sdpa_backends.py"), "--sizes", *sizes], 60),
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
        (
            "loss",
            [
                py,
                str(BENCH / "fused_loss.py"),
                "--device",
                "cuda",
                "--dtype",
                "bf16",
                "--batch",
                "16",
                "--seq",
                "2048",
                "--compile",
            ],
            90,
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


def warm_commands(
    py: str, sizes: list[str] = MATRIX_SIZES, configs: list[str] = MATRIX_CONFIGS
) -> list[list[str]]:
    """One `gpu_warm.py` per block graph of the matrix (`gpu_warm.warm_targets`)."""
    from gpu_warm import warm_targets

    script = str(BENCH / "gpu_warm.py")
    return [
        [py, script, "--sizes", size, "--configs", config] for size, config in warm_targets(sizes, configs)
    ]


def start_warm(commands: list[list[str]], logs: Path) -> list[tuple[subprocess.Popen, Path]]:
    """Starts every warm-up (own process group, output to a file in `logs`), inductor's compile workers split
    between them (4 cores left to the GPU tests beside them: with every core compiling, the tests ran 234 s)."""
    logs.mkdir(parents=True, exist_ok=True)
    threads = max(1, ((os.cpu_count() or 1) - 4) // max(1, len(commands)))  # 4 cores for the GPU tests
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": str(threads)}
    procs = []
    for i, cmd in enumerate(commands):
        log = logs / f"warm-{i}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)  # fmt: skip
        procs.append((proc, log))
    return procs


def finish_warm(procs: list[tuple[subprocess.Popen, Path]], deadline: float, started: float) -> dict:
    """Waits for the warm-ups until `deadline` (monotonic), kills what is left; the `warm` line: each graph's
    row (seconds, cache counts) or error, and whether all finished."""
    graphs, errors, killed = [], [], 0
    for proc, log in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            late = False
        except subprocess.TimeoutExpired:
            killed, late = killed + 1, True
        _kill_group(proc)
        proc.wait()  # reaped: SIGKILL cannot be ignored
        lines = log.read_text(errors="replace").splitlines()
        rows = [json.loads(x) for x in lines if x.startswith('{"warm"')]
        graphs += rows
        if proc.returncode != 0 and not rows and not late:
            errors.append(" | ".join(x for x in lines[-6:] if x)[-500:])
    ok = not killed and not errors and not any("error" in r for r in graphs)
    row = {"check": "warm", "ok": ok, "seconds": round(time.monotonic() - started, 1), "graphs": graphs}
    if killed:
        row["killed"] = f"{killed} still compiling at the wait's end"
    if errors:
        row["errors"] = errors
    return row


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
    p.add_argument("--no-warm", action="store_true", help="no warm-up: the matrix compiles for itself")
    p.add_argument("--matrix-sizes", nargs="+", default=MATRIX_SIZES)
    p.add_argument("--matrix-configs", nargs="+", default=MATRIX_CONFIGS)
    p.add_argument("--matrix-steps", type=int, default=30)
    p.add_argument("--long-steps", type=int, default=200, help="the long bf16 vs FP8 run's steps (0: none)")
    args = p.parse_args()
    start = time.monotonic()
    for name in RUN_NAMES.values():
        shutil.rmtree(REPO / "outputs" / name, ignore_errors=True)
    env_line = {"check": "start", "python": args.python, "pythonpath": os.environ.get("PYTHONPATH", "")}
    print(json.dumps(env_line), flush=True)
    results = []
    plan = steps(args.python, sizes=args.matrix_sizes, configs=args.matrix_configs,
                 matrix_steps=args.matrix_steps, long_steps=args.long_steps)  # (asks torch for the GPU count once)  # fmt: skip
    names = [name for name, _, _ in plan]
    if set(args.only or ()) - set(names):
        p.error(f"--only {' '.join(sorted(set(args.only) - set(names)))}: the steps are {', '.join(names)}")
    wanted = set(args.only) if args.only else set(names) - OPTIONAL
    warming = []
    if "matrix" in wanted and not args.no_warm and args.total_s > WARM_UNTIL_S:
        commands = warm_commands(args.python, args.matrix_sizes, args.matrix_configs)
        warming = start_warm(commands, REPO / "outputs" / "gpu-check-warm")
    for name, cmd, limit in plan:
        if name not in wanted:
            continue
        if name == "matrix" and warming:
            print(json.dumps(finish_warm(warming, start + WARM_UNTIL_S, start)), flush=True)
        left = args.total_s - (time.monotonic() - start)
        if name == "matrix":  # what is left after the later steps' usual time; a config starts only within it
            later = sum(v for k, v in EXPECTED_AFTER_MATRIX.items() if k in wanted)
            budget = max(30.0, left - later)
            cmd, limit = [*cmd, "--budget-s", str(int(budget))], budget + 60
        limit = min(limit, left)
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
