"""Preemption through `train.py`: SIGTERM mid-run -> a checkpoint at the next step, exit 75, an exact rerun."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest

from foundry.train.preemption import REQUEUE_EXIT_CODE
from tests.foundry.checkpoint.runs import (
    assert_same_final_state,
    assert_same_run,
    command,
    env_for,
    last_step,
    train,
    train_rows,
)

STEPS = 20
RUN = [
    f"trainer.max_duration={STEPS}ba",
    "trainer.eval_interval=0",
    "checkpoint=local",
    "checkpoint.save_interval=50ba",  # only the preemption save and the final one
]


def _train_and_signal(
    args, cwd, env, *, metrics, at_step: int, sig: int, group: bool
) -> subprocess.CompletedProcess:
    """Starts training, sends `sig` once `metrics` shows `at_step` (to its whole process group, data workers
    included, as Slurm does, with `group`), and waits for the process to exit."""
    proc = subprocess.Popen(
        command(args),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=group,
    )
    try:
        while proc.poll() is None and last_step(metrics) < at_step:
            time.sleep(0.002)
        assert proc.poll() is None, "training finished before the signal: raise max_duration"
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "group", "workers"),
    [(signal.SIGTERM, True, 2), (signal.SIGUSR1, False, 0)],
    ids=["SIGTERM-to-group-2-workers", "SIGUSR1-to-main"],
)
def test_signal_checkpoints_at_the_next_step_exits_75_and_the_rerun_is_exact(tmp_path, sig, group, workers):
    run = [*RUN, f"data.num_workers={workers}"]
    cache = tmp_path / "cache"
    ref_cwd = tmp_path / "ref"
    ref_cwd.mkdir()
    train([*run, "run_name=ref"], ref_cwd, env_for(cache))
    reference = ref_cwd / "outputs" / "ref"

    args = [*run, "run_name=pre"]
    run_dir = tmp_path / "outputs" / "pre"
    proc = _train_and_signal(
        args, tmp_path, env_for(cache), metrics=run_dir / "metrics.jsonl", at_step=6, sig=sig, group=group
    )
    assert proc.returncode == REQUEUE_EXIT_CODE, proc.stdout[-3000:] + proc.stderr[-3000:]
    stopped = last_step(run_dir / "metrics.jsonl")
    assert 6 <= stopped < STEPS
    assert f"preempted by {signal.Signals(sig).name} at step {stopped}" in proc.stdout
    assert (run_dir / "checkpoints" / f"ep0-ba{stopped}" / "manifest.json").exists(), "checkpoint at the stop"
    assert not (run_dir / "checkpoints" / f"ep0-ba{STEPS}").exists()

    rerun = train(args, tmp_path, env_for(cache))
    assert "autoresume: loaded" in rerun.stdout
    assert_same_run(run_dir, reference, STEPS)


def _rank_pid(agent: psutil.Process, rank: int, timeout: float = 120.0) -> int:
    """The pid of the torchrun worker with `RANK=rank` (a child of the agent `agent`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in agent.children(recursive=True):
            try:
                if child.environ().get("RANK") == str(rank):
                    return child.pid
            except psutil.Error:
                continue
        time.sleep(0.05)
    raise AssertionError(f"no torchrun worker with RANK={rank}")


@pytest.mark.dist
def test_sigterm_to_one_of_two_ranks_stops_both_at_the_same_step_and_the_rerun_is_exact(tmp_path):
    cache = tmp_path / "cache"
    env = env_for(cache, OMP_NUM_THREADS="1")
    ddp = [*RUN, "parallelism=ddp"]
    ref_cwd = tmp_path / "ref"
    ref_cwd.mkdir()
    train([*ddp, "run_name=ref"], ref_cwd, env, torchrun=2)
    reference = ref_cwd / "outputs" / "ref"

    args = [*ddp, "run_name=pre"]
    run_dir = tmp_path / "outputs" / "pre"
    proc = subprocess.Popen(
        command(args, torchrun=2),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        rank1 = _rank_pid(psutil.Process(proc.pid), 1)
        while proc.poll() is None and last_step(run_dir / "metrics.jsonl") < 5:
            time.sleep(0.002)
        assert proc.poll() is None, "training finished before the signal: raise max_duration"
        psutil.Process(rank1).send_signal(
            signal.SIGTERM
        )  # rank 1 only; rank 0 learns it at the step boundary
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-3000:]
    stopped = last_step(run_dir / "metrics.jsonl")
    assert f"preempted by SIGTERM at step {stopped}" in out, out[-3000:]
    assert f"preempted by a signal to another rank at step {stopped}" in out, out[-3000:]
    assert "exitcode  : 75" in out or "exitcode: 75" in out, out[-3000:]
    assert (run_dir / "checkpoints" / f"ep0-ba{stopped}" / "manifest.json").exists()

    train(args, tmp_path, env, torchrun=2)
    assert_same_final_state(run_dir / "checkpoints" / f"ep0-ba{STEPS}", reference, STEPS)
    rows = train_rows(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
