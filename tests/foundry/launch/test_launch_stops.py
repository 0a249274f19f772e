"""Through `python -m foundry.launch`: what a restart cannot fix ends the launch at once, with its exit code and
a `fatal` event (a bad override: exit 2; a failed device check on every rank: exit 3), and an attempt that never
reaches fit is dumped, killed and restarted after `--startup-timeout`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from foundry.launch import read_events
from tests.foundry.checkpoint.runs import REPO, TINY, env_for

pytestmark = pytest.mark.slow  # torchrun and its ranks start in several seconds each on 2 busy cores


def _launch(cwd: Path, options: list[str], job: list[str], *, nproc: int = 2) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "foundry.launch", "--max-restarts=3", *options, "--standalone",
        f"--nproc-per-node={nproc}", "--", *job,
    ]  # fmt: skip
    env = env_for(cwd / "cache", OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _kinds(run_dir: Path) -> list[str]:
    return [e["event"] for e in read_events(run_dir)]


def test_config_error_ends_the_launch_without_restarts(tmp_path):
    job = [str(REPO / "train.py"), *TINY, "trainer.no_such_key=1", "run_name=bad"]
    proc = _launch(tmp_path, [], job)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no_such_key" in proc.stderr
    run_dir = tmp_path / "outputs" / "bad"
    kinds = _kinds(run_dir)
    assert kinds == ["start", "health", "health", "fatal", "summary"], kinds
    events = read_events(run_dir)
    fatal, summary = events[3], events[4]
    assert (fatal["cause"], fatal["exit_code"], fatal["attempt"]) == ("config", 2, 0)
    assert (summary["exit_code"], summary["cause"], summary["restarts"], summary["failures"]) == (
        2,
        "fatal",
        0,
        0,
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where --cuda's device check fails")
def test_failed_device_check_on_every_rank_ends_the_launch(tmp_path):
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('the health check should have stopped this rank')\n")
    proc = _launch(tmp_path, ["--cuda", "--no-all-reduce-check"], [str(script), "run_name=gpu"])
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    events = read_events(tmp_path / "outputs" / "gpu")
    kinds = [e["event"] for e in events]
    # a slower rank's own failed check may land after the fatal event (it was checking while the first exited)
    assert "restart" not in kinds and [k for k in kinds if k != "health"][-2:] == ["fatal", "summary"], kinds
    fatal = next(e for e in events if e["event"] == "fatal")
    assert (fatal["cause"], fatal["check"], fatal["exit_code"]) == ("health", "devices", 3), fatal
    attempts = [e["attempt"] for e in events if e["event"] == "health"]
    assert attempts and set(attempts) == {0}, "one attempt only (stopped at the first rank's fatal exit)"


def test_startup_timeout_dumps_kills_and_restarts(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(
        "import os, time\n"
        "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0':\n"
        "    time.sleep(600)  # the first attempt never reaches fit\n"
    )
    options = ["--startup-timeout=3", "--no-all-reduce-check"]
    proc = _launch(tmp_path, options, [str(script), "run_name=stuck"], nproc=1)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    events = read_events(tmp_path / "outputs" / "stuck")
    kinds = [e["event"] for e in events]
    assert kinds.count("failure") == 1 and kinds.count("restart") == 1 and kinds[-1] == "summary", (
        kinds,
        proc.stderr[-4000:],
    )
    (failure,) = [e for e in events if e["event"] == "failure"]
    assert (failure["cause"], failure["phase"], failure["attempt"]) == ("startup", "healthy", 0)
    assert failure["stalled_s"] > 3
    (stacks,) = [e for e in events if e["event"] == "stacks"]
    (dump,) = [Path(p).read_text() for p in stacks["paths"]]
    assert 'stuck.py", line 3' in dump, dump
    assert events[-1]["ok"] and events[-1]["failures"] == 1
