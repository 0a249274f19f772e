"""Slurm's requeue path on submitit's local executor: `train.py -m hydra/launcher=slurm-local`, SIGTERM to the
job mid-run (as Slurm preempts), submitit requeues it, and the requeued job finishes bitwise equal to an
uninterrupted run.

The signal goes to the local executor's controller, which forwards it to the submitit task; the task's
submitit handler calls the launcher's `checkpoint`, which forwards it to `python -m foundry.launch` (on Slurm,
every process of the step gets it directly), waits for the preemption checkpoint (exit 75) and resubmits.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.foundry.checkpoint.runs import (
    REPO,
    TINY,
    assert_same_run,
    env_for,
    last_step,
    train,
)

pytestmark = pytest.mark.slow

STEPS = 20
RUN = [
    f"trainer.max_duration={STEPS}ba",
    "trainer.eval_interval=0",
    "checkpoint=local",
    "checkpoint.save_interval=50ba",  # only the preemption save and the final one
]


def _controller(submitter: psutil.Process, timeout: float = 120.0) -> psutil.Process:
    """The local executor's job controller (`python -m submitit.local._local`), a child of the submitter."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in submitter.children(recursive=True):
            try:
                # the python process itself, not the `sh -c "export ... && python ..."` around it
                if "submitit.local._local" in child.cmdline():
                    return child
            except psutil.Error:
                continue
        time.sleep(0.05)
    raise AssertionError("no submitit local controller started")


def _rank0(submitter: psutil.Process, timeout: float = 120.0) -> psutil.Process:
    """The training rank (torchrun's worker with RANK=0) under the submitit task."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in submitter.children(recursive=True):
            try:
                if child.environ().get("RANK") == "0" and "foundry.launch.worker" in child.cmdline():
                    return child
            except psutil.Error:
                continue
        time.sleep(0.05)
    raise AssertionError("no rank 0 started")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache):
    """An uninterrupted 1-rank torchrun run."""
    cwd = tmp_path_factory.mktemp("ref")
    train([*RUN, "run_name=ref"], cwd, env_for(cache, OMP_NUM_THREADS="1"), torchrun=1)
    return cwd / "outputs" / "ref"


@pytest.mark.parametrize("target", ["job", "rank"])
def test_preempted_job_is_requeued_and_finishes_exactly(tmp_path, cache, reference, target):
    """`job`: SIGTERM to the job (Slurm's preemption); `rank`: to the training rank alone, so only the
    launcher's exit code 75 tells the task to requeue."""
    env = env_for(cache, OMP_NUM_THREADS="1")

    cmd = [
        sys.executable,
        str(REPO / "train.py"),
        "-m",
        "hydra/launcher=slurm-local",
        *TINY,
        *RUN,
        "run_name=job",
    ]
    run_dir = tmp_path / "outputs" / "job"
    log = (tmp_path / "submitter.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        submitter = psutil.Process(proc.pid)
        victim = _controller(submitter) if target == "job" else _rank0(submitter)
        while proc.poll() is None and last_step(run_dir / "metrics.jsonl") < 6:
            time.sleep(0.01)
        assert proc.poll() is None, "the job finished before the signal: raise max_duration"
        victim.send_signal(signal.SIGTERM)
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    logs = [(tmp_path / "submitter.log").read_text()]
    logs += [p.read_text()[-6000:] for p in (tmp_path / "outputs" / "multirun").glob("*/.submitit/*/*_log.*")]
    assert proc.returncode == 0, "\n".join(logs)[-12000:]

    (task_log,) = (tmp_path / "outputs" / "multirun" / "job" / ".submitit").glob("*/*_0_log.out")
    text = task_log.read_text()
    assert "this job is preempted" in text and "Requeued job" in text, text[-5000:]
    assert text.count("foundry slurm: /") == 2, "two launcher starts"
    if target == "job":  # the task's handler waited for the launcher's checkpoint
        assert "foundry slurm: launcher stopped after SIGTERM; requeueing" in text
    else:  # the launcher's exit code asked for the requeue
        assert "foundry slurm: launcher exited 75; asking submitit to requeue" in text
    assert "autoresume: loaded" in text, text[-5000:]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    starts = [e for e in events if e["event"] == "start"]
    summaries = [e for e in events if e["event"] == "summary"]
    assert len(starts) == 2 and len(summaries) == 2, [e["event"] for e in events]
    assert not summaries[0]["ok"] and summaries[1]["ok"] and summaries[1]["final_step"] == STEPS

    stops = sorted(int(p.name.split("ba")[1]) for p in (run_dir / "checkpoints").glob("ep0-ba*"))
    assert len(stops) == 2 and 6 <= stops[0] < STEPS and stops[1] == STEPS, stops
    assert_same_run(run_dir, reference, STEPS)


def test_unknown_launcher_key_fails_before_submission(tmp_path):
    cmd = [
        sys.executable,
        str(REPO / "train.py"),
        "-m",
        "hydra/launcher=slurm-local",
        "+hydra.launcher.gpus_per_nod=1",
        *TINY,
    ]
    out = subprocess.run(
        cmd, cwd=tmp_path, env=env_for(tmp_path / "cache"), capture_output=True, text=True, timeout=300
    )
    assert out.returncode != 0
    assert "gpus_per_nod" in out.stdout + out.stderr
    assert not list(Path(tmp_path).glob("outputs/multirun/*/.submitit/[0-9]*")), "nothing was submitted"
