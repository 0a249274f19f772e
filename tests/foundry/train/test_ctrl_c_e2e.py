"""Ctrl-C on `python train.py` (issue 40 item 2): the step finishes, a checkpoint is written, the line that
resumes is printed, exit 130 and no traceback; the printed command then continues the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.train_py import run_train_py

REPO = Path(__file__).resolve().parents[3]
ARGS = ["experiment=smoke-cpu", "run_name=ctrlc", "data.corpus_mb=0.15", "data.vocab_size=300"]

pytestmark = pytest.mark.slow  # two train.py runs


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job starts its children with SIGINT ignored


def test_ctrl_c_checkpoints_prints_the_resume_line_and_exits_130(tmp_path: Path) -> None:
    env = {**os.environ, "FOUNDRY_CACHE": str(tmp_path / "cache")}
    env.pop("RUN_NAME", None)
    cmd = [sys.executable, str(REPO / "train.py"), *ARGS, "trainer.max_duration=100000ba"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_default_sigint)  # fmt: skip
    live = tmp_path / "outputs" / "ctrlc" / "live.json"
    deadline = time.monotonic() + 300
    while not (live.exists() and json.loads(live.read_text() or "{}").get("phase") in ("fit", "step")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-2000:] + err[-3000:]
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err, err[-3000:]
    assert "interrupted (Ctrl-C) at step" in out
    assert "to resume: rerun the same command with run_name=ctrlc" in out
    manifests = list((tmp_path / "outputs" / "ctrlc" / "checkpoints").glob("*/manifest.json"))
    assert len(manifests) == 1
    step = json.loads(manifests[0].read_text())["step"]
    again = run_train_py([*ARGS, f"trainer.max_duration={step + 2}ba"], tmp_path)
    assert "autoresume" in again.stdout and f"step {step}" in again.stdout, again.stdout[-3000:]
