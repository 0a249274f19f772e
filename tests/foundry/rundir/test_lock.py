"""One process per run (issue 39): a second command on a running run is refused at start with one line naming
the holder; the lock goes with its process however it ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foundry.errors import ConfigError
from foundry.rundir.layout import LOCK as LOCK_FILE
from foundry.rundir.lock import RunLock
from tests.train_py import REPO, run_train_py


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    first = RunLock(tmp_path, run_name="x")
    first.acquire()
    info = json.loads((tmp_path / LOCK_FILE).read_text())
    assert info["pid"] == os.getpid() and info["host"] and info["started"]
    with pytest.raises(
        ConfigError, match=rf"run 'x' is already running \(pid {os.getpid()} on .* since .*\): wait"
    ):
        RunLock(tmp_path, run_name="x").acquire()
    first.release()
    second = RunLock(tmp_path, run_name="x")
    second.acquire()  # released: free again
    assert second.held
    second.release()


def test_the_lock_goes_with_a_killed_process(tmp_path):
    code = (
        "import sys, time; from pathlib import Path; from foundry.rundir.lock import RunLock\n"
        f"RunLock(Path({str(tmp_path)!r}), run_name='x').acquire(); print('held', flush=True); time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"pid {proc.pid}"):
            RunLock(tmp_path, run_name="x").acquire()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    lock = RunLock(tmp_path, run_name="x")
    lock.acquire()  # kill -9 left no stale lock
    lock.release()


def test_train_py_refuses_a_second_run_of_the_same_name_while_the_first_runs(tmp_path):
    env = {**os.environ, "FOUNDRY_CACHE": str(tmp_path / "cache"), "WANDB_MODE": "offline"}
    env.pop("RUN_NAME", None)
    args = ["model=mpt-tiny", "trainer.max_duration=100000ba", "trainer.eval_interval=0", "checkpoint=none",
            "run_name=busy"]  # fmt: skip
    first = subprocess.Popen([sys.executable, str(REPO / "train.py"), *args], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        lock = tmp_path / "outputs" / "busy" / LOCK_FILE
        for _ in range(1200):  # the first run has started training (its lock names it)
            if lock.exists() and lock.read_text().startswith("{") and first.poll() is None:
                break
            time.sleep(0.25)
        else:
            pytest.fail("the first run never took its lock")
        proc = run_train_py([*args[:-1], "trainer.max_duration=2ba", "run_name=busy"], tmp_path, ok=False,
                            full_error=False)  # fmt: skip
        err = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        assert proc.returncode == 2 and err[-1].startswith("error: run 'busy' is already running (pid "), err[
            -3:
        ]
        assert str(first.pid) in err[-1] and "Traceback" not in proc.stderr
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    proc = run_train_py([*args[:-1], "trainer.max_duration=2ba", "run_name=busy"], tmp_path)  # free again
    assert (Path(tmp_path) / "outputs" / "busy" / "final_metrics.json").exists()
