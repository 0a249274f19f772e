"""Failure recovery benchmark: the time a crash, a hang and a preemption cost a run under `foundry.launch`.

On the CPU smoke model (mpt-tiny, trainer=cpu, 2 ranks, DDP on gloo, a checkpoint every `--every` steps) the
script injects one failure per case into a supervised run and prints one JSON line per case, read from the
run's `events.jsonl` (and, for the rerun after a preemption, from the heartbeats: a new launch has no
`resumed` event):

- crash: `kill -9` rank 1 at step `--at`;  hang: `SIGSTOP` rank 1 (small `--hang-floor`);
- preemption: SIGTERM to the launcher (as a scheduler would), which exits 75 after a checkpoint; then the
  same command again.

Per case: work lost since the last checkpoint (`work_lost_steps`, and `work_lost_s` = those steps x the
median step time: the steps redone after the resume), `detection_s` (injection -> the launcher's `failure`
or `preempted` event), `restart_to_first_step_s` (that event -> the first step after the resumed step) and
`total_lost_s` (the sum); `survivor_stopped_s`: injection -> rank 0 (not injected) gone, i.e. how
long torchrun takes to stop the rest of the group. A last line runs 3 successive crashes in one run: restart-to-first-step per
restart must not grow with the number of restarts (`grows`: the last over 1.5x the first).

    python scripts/bench/failure_recovery.py              # ~6-10 min on 2 CPU cores
    python scripts/bench/failure_recovery.py --cases crash
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import machine

from foundry.events import read_events

REPO = Path(__file__).resolve().parents[2]
TINY = ["experiment=smoke-cpu", "data.corpus_mb=0.15", "data.vocab_size=300", "trainer.progress_bar=false"]


@dataclass
class Run:
    """One supervised launch (and what the bench saw of it)."""

    proc: subprocess.Popen
    run_dir: Path
    started: float
    step_seconds: list[float] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.run_dir)

    def median_step_s(self) -> float:
        return statistics.median(self.step_seconds) if self.step_seconds else 0.0


def launch(work: Path, name: str, args: argparse.Namespace, *options: str) -> Run:
    train = [
        *TINY, f"trainer.max_duration={args.steps}ba", "trainer.eval_interval=0", "checkpoint=local",
        f"checkpoint.save_interval={args.every}ba", "parallelism=ddp", f"run_name={name}",
    ]  # fmt: skip
    cmd = [
        sys.executable, "-m", "foundry.launch", "--max-restarts=5", *options, "--standalone",
        "--nproc-per-node=2", "--", str(REPO / "train.py"), *train,
    ]  # fmt: skip
    env = {
        **os.environ,
        "FOUNDRY_CACHE": str(work / "cache"),
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
    }
    log = (work / f"{name}.log").open("a")
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    return Run(proc, work / "outputs" / name, time.time())


def _beat(run: Run, rank: int) -> dict[str, Any]:
    try:
        return dict(json.loads((run.run_dir / "heartbeat" / f"rank{rank}.json").read_text()))
    except (OSError, ValueError):
        return {}


def wait_step(run: Run, rank: int, step: int, *, attempt: int = 0, timeout: float = 600) -> dict[str, Any]:
    """The beat of `rank` once it shows `step` in `attempt` or later (collects step times meanwhile)."""
    deadline = time.time() + timeout
    seen = -1
    while time.time() < deadline:
        if run.proc.poll() is not None:
            raise RuntimeError(f"launcher exited ({run.proc.returncode}) before rank {rank} reached {step}")
        beat = _beat(run, rank)
        if beat.get("attempt", -1) >= attempt and beat.get("phase") == "step":
            if beat["step"] != seen and beat.get("step_seconds", 0) > 0:
                seen = beat["step"]
                run.step_seconds.append(beat["step_seconds"])
            if beat["step"] >= step:
                return beat
        time.sleep(0.005)
    raise RuntimeError(f"rank {rank} did not reach step {step} in {timeout}s")


def finish(run: Run, timeout: float = 900) -> int:
    try:
        return run.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        run.proc.kill()
        return run.proc.wait()


def _only(events: list[dict[str, Any]], kind: str, **match: Any) -> dict[str, Any]:
    found = [e for e in events if e["event"] == kind and all(e.get(k) == v for k, v in match.items())]
    if not found:
        kinds = [e["event"] for e in events]
        raise RuntimeError(f"no {kind!r} event {match or ''} in events.jsonl: {kinds}")
    return found[0]


def line(case: str, run: Run, *, injected_at: float, detected: float, first_step: float, steps_lost: int,
         resumed_step: int, **extra: Any) -> dict[str, Any]:  # fmt: skip
    work_lost_s = steps_lost * run.median_step_s()
    detection, restart = detected - injected_at, first_step - detected
    return {
        "bench": "failure_recovery", "case": case, "model": "mpt-tiny (smoke-cpu)", "ranks": 2,
        "resumed_step": resumed_step, "work_lost_steps": steps_lost, "work_lost_s": round(work_lost_s, 3),
        "detection_s": round(detection, 3), "restart_to_first_step_s": round(restart, 3),
        "total_lost_s": round(detection + restart + work_lost_s, 3),
        "median_step_s": round(run.median_step_s(), 4), **extra,
    }  # fmt: skip


def restart_case(case: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """crash (SIGKILL) or hang (SIGSTOP): rank 1 at step `--at`; torchrun restarts, the run resumes."""
    options = [f"--hang-floor={args.hang_floor}", "--hang-k=5"] if case == "hang" else []
    run = launch(work, case, args, *options)
    beat = wait_step(run, 1, args.at)
    survivor = _beat(run, 0).get("pid")
    injected = time.time()
    os.kill(beat["pid"], signal.SIGKILL if case == "crash" else signal.SIGSTOP)
    group_stopped = _gone(survivor, run) - injected if survivor else None
    rc = finish(run)
    events = run.events()
    failure = _only(events, "failure", attempt=0)
    resumed = _only(events, "resumed")  # raises (the case fails) when the restart never made a step
    return line(
        case, run, injected_at=injected, detected=failure["time"], first_step=resumed["time"],
        steps_lost=resumed["steps_lost"], resumed_step=resumed["resumed_step"], injected_at_step=beat["step"],
        cause=failure["cause"], launcher_exit=rc, checkpoint_every=args.every,
        survivor_stopped_s=None if group_stopped is None else round(group_stopped, 3),
    )  # fmt: skip


def _gone(pid: int, run: Run, timeout: float = 300) -> float:
    """When process `pid` (rank 0, which nothing killed) is gone: torchrun stopped the rest of the group."""
    deadline = time.time() + timeout
    while time.time() < deadline and run.proc.poll() is None:
        try:
            os.kill(pid, 0)
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.01)
    return time.time()


def preemption_case(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """SIGTERM to the launcher at step `--at`: checkpoint, exit 75; the same command again resumes.

    `detection_s` is SIGTERM -> the `preempted` event (the checkpoint is saved in it); the time between the
    exit and the rerun belongs to the scheduler and is left out: `restart_to_first_step_s` is the rerun's
    start -> its first step after the resumed one.
    """
    run = launch(work, "preempt", args)
    beat = wait_step(run, 1, args.at)
    injected = time.time()
    run.proc.send_signal(signal.SIGTERM)
    rc = finish(run, timeout=300)
    preempted = _only(run.events(), "preempted")
    rerun = launch(work, "preempt", args)
    fit = _wait_fit(rerun)
    first = wait_step(rerun, 0, fit + 1)
    rc2 = finish(rerun)
    last = max(beat["step"], preempted.get("step") or 0)
    return line(
        "preemption", run, injected_at=injected, detected=preempted["time"],
        first_step=preempted["time"] + first["time"] - rerun.started, steps_lost=max(last - fit, 0),
        resumed_step=fit, injected_at_step=beat["step"], checkpoint=preempted.get("checkpoint"),
        launcher_exit=rc, rerun_exit=rc2, checkpoint_every=args.every,
    )  # fmt: skip


def _wait_fit(run: Run, timeout: float = 600) -> int:
    """The step rank 0 resumed from (its `fit` beat of this launch)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        beat = _beat(run, 0)
        if beat.get("phase") in ("fit", "step") and beat.get("time", 0) >= run.started:
            return int(beat["step"]) if beat["phase"] == "fit" else int(beat["step"]) - 1
        if run.proc.poll() is not None:
            raise RuntimeError(f"rerun exited ({run.proc.returncode}) before fit")
        time.sleep(0.005)
    raise RuntimeError("rerun never reached fit")


def repeated_crashes(work: Path, args: argparse.Namespace, n: int = 3) -> dict[str, Any]:
    """n crashes in one run (rank 1, a kill each `--at` steps): restart-to-first-step per restart."""
    run = launch(work, "crashes", args)
    for i in range(n):
        beat = wait_step(run, 1, args.at * (i + 1), attempt=i)
        os.kill(beat["pid"], signal.SIGKILL)
        _wait_event(run, "resumed", attempt=i + 1)
    rc = finish(run)
    events = run.events()
    resumed = [e for e in events if e["event"] == "resumed"]
    times = [e["restart_to_first_step_s"] for e in resumed]
    failed = {e["attempt"] + 1: e["time"] for e in events if e["event"] == "failure"}
    started = {e["attempt"]: e["time"] for e in events if e["event"] == "restart"}
    return {
        "bench": "failure_recovery", "case": f"{n}_crashes_one_run", "ranks": 2,
        "restart_to_first_step_s": times, "resumed_steps": [e["resumed_step"] for e in resumed],
        "failure_to_ranks_started_s": [round(started[a] - failed[a], 3) for a in sorted(started) if a in failed],
        "ranks_started_to_first_step_s": [round(e["time"] - started[e["attempt"]], 3) for e in resumed
                                          if e["attempt"] in started],
        "grows": len(times) == n and times[-1] > 1.5 * times[0], "launcher_exit": rc,
    }  # fmt: skip


def _wait_event(run: Run, kind: str, timeout: float = 600, **match: Any) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(e["event"] == kind and all(e.get(k) == v for k, v in match.items()) for e in run.events()):
            return
        if run.proc.poll() is not None:
            raise RuntimeError(f"launcher exited ({run.proc.returncode}) before a {kind} event {match}")
        time.sleep(0.05)
    raise RuntimeError(f"no {kind} event {match} in {timeout}s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", default=["crash", "hang", "preemption", "crashes"])
    p.add_argument("--steps", type=int, default=60, help="training steps per run")
    p.add_argument("--every", type=int, default=10, help="checkpoint interval (steps)")
    p.add_argument("--at", type=int, default=15, help="inject at this step (3 crashes: at, 2 at, 3 at)")
    p.add_argument("--hang-floor", type=float, default=4.0)
    p.add_argument(
        "--crashes", type=int, default=3, help="successive crashes in the last case (--steps > that x --at)"
    )
    p.add_argument("--keep", action="store_true", help="keep the work folder (logs, events) and print it")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="failure-recovery-"))
    info = machine()
    try:
        for case in args.cases:
            try:
                if case in ("crash", "hang"):
                    out = restart_case(case, work, args)
                elif case == "preemption":
                    out = preemption_case(work, args)
                else:
                    out = repeated_crashes(work, args, n=args.crashes)
            except RuntimeError as e:  # a case that did not recover is a finding, not a crash of the bench
                out = {"bench": "failure_recovery", "case": case, "error": str(e)}
            print(json.dumps({**out, **info}), flush=True)
    finally:
        if args.keep:
            print(f"work folder: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
