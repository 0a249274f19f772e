"""End to end with real training under `python -m foundry.launch` (2 CPU ranks, gloo):

- kill -9 a rank: `runs list` shows the run restarting or running, then finished with 1 restart;
- `runs stop` a second launch: the ranks checkpoint and exit (preempted); `runs resume`'s command, run as
  printed, finishes it, at the same final loss as the killed-and-restarted run;
- `runs report` over both: the plotted points equal metrics.jsonl (and in Chromium when it is installed).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foundry.runs.cli import main
from tests.foundry.checkpoint.runs import REPO, TINY, env_for
from tests.foundry.runs.dom import check_against_metrics

pytestmark = pytest.mark.slow  # ~3 min: three launcher runs of 2 ranks

RUN = ["trainer.max_duration=300ba", "trainer.eval_interval=100ba", "checkpoint=local",
       "checkpoint.save_interval=50ba", "parallelism=ddp"]  # fmt: skip


def launch(cwd: Path, env: dict[str, str], name: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "foundry.launch", "--standalone", "--nproc-per-node=2", "--hang-floor=300",
           "--", str(REPO / "train.py"), *TINY, *RUN, f"run_name={name}"]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def wait_step(run_dir: Path, rank: int, step: int, proc: subprocess.Popen) -> dict:
    beat_file = run_dir / "heartbeat" / f"rank{rank}.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            beat = json.loads(beat_file.read_text())
        except (OSError, ValueError):
            beat = {}
        if beat.get("phase") == "step" and beat.get("step", 0) >= step:
            return beat
        time.sleep(0.05)
    raise TimeoutError(f"{beat_file} never reached step {step}")


def listed(root: Path, name: str, capsys) -> list[str]:
    assert main(["list", str(root)]) == 0
    return next(ln.split() for ln in capsys.readouterr().out.splitlines() if ln.startswith(name + " "))


def test_kill_restart_stop_resume_report(tmp_path: Path, capsys) -> None:
    env = env_for(tmp_path / "cache", OMP_NUM_THREADS="1")
    outputs = tmp_path / "outputs"
    # 1) a rank killed: restarting -> running -> finished, 1 restart
    proc = launch(tmp_path, env, "killed")
    beat = wait_step(outputs / "killed", 1, 60, proc)
    os.kill(beat["pid"], signal.SIGKILL)
    seen = set()
    while proc.poll() is None:
        seen.add(listed(outputs, "killed", capsys)[2])
        time.sleep(0.5)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    row = listed(outputs, "killed", capsys)
    assert row[1:4] == ["pretrain", "finished", "300/300"] and row[-1] == "1"
    assert seen <= {"running", "restarting", "finished"} and "running" in seen, seen
    # 2) `runs stop` on a second launch: preempted (checkpoint at the stop step), then the resume command
    proc = launch(tmp_path, env, "stopped")
    wait_step(outputs / "stopped", 0, 40, proc)
    assert main(["--root", str(outputs), "stop", "stopped"]) == 0
    assert "sent SIGTERM to the launcher" in capsys.readouterr().out
    proc.wait(timeout=120)
    row = listed(outputs, "stopped", capsys)
    assert row[2] == "preempted", row
    stop_step = int(row[3].split("/")[0])
    assert 40 <= stop_step < 300
    assert main(["--root", str(outputs), "show", "stopped"]) == 0
    assert f"-ba{stop_step}  step {stop_step}" in capsys.readouterr().out  # the stop's checkpoint
    assert main(["--root", str(outputs), "resume", "stopped"]) == 0
    cmd = shlex.split(capsys.readouterr().out)
    assert cmd[:3] == ["python", "-m", "foundry.launch"]
    done = subprocess.run(
        [sys.executable, *cmd[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    row = listed(outputs, "stopped", capsys)
    assert row[2:4] == ["finished", "300/300"]
    assert (
        row[4] == listed(outputs, "killed", capsys)[4]
    )  # same final loss: the interruptions changed nothing
    # 3) the report over both runs: every plotted point is the metrics.jsonl value
    report = tmp_path / "report.html"
    assert main(["report", str(outputs), "-o", str(report)]) == 0
    html = report.read_text()
    assert check_against_metrics(html, {"killed": outputs / "killed", "stopped": outputs / "stopped"}) > 600
    assert 'data-event="failure"' in html and 'data-event="restart"' in html and 'data-event="stop"' in html
    if Path("/usr/bin/chromium").exists():
        from tests.foundry.runs.test_report_browser import render

        png, dom = render(report, tmp_path)
        assert (
            check_against_metrics(dom, {"killed": outputs / "killed", "stopped": outputs / "stopped"}) > 600
        )
        print(f"screenshot: {png}")
