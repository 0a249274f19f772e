"""`python -m foundry.launch`: `--help` lists every option (exit 0); a command without `-- train.py` or with a
script that does not exist is one `error: ...` line and exit 2, before torchrun starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _launch(*args: str, cwd: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run(
        [sys.executable, "-m", "foundry.launch", *args], capture_output=True, text=True, env=env, cwd=cwd,
        timeout=120,
    )  # fmt: skip


def test_help_prints_every_option_and_exits_0(tmp_path):
    proc = _launch("--help", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    for option in ("--max-restarts", "--hang-k", "--min-free-gb", "--check-url", "--cuda", "--poll"):
        assert option in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "no training command"),
        (("--max-restarts", "1"), "-- train.py"),
        (("--", "nosuch.py"), "nosuch.py"),
        (
            ("--", "{train.py}", "run_name=.."),
            "run_name='..'",
        ),  # issue 39: the launcher wrote into outputs/..
    ],
)
def test_a_bad_command_is_one_error_line_and_exit_2(tmp_path, args, needle):
    train_py = str(Path(__file__).resolve().parents[3] / "train.py")
    proc = _launch(*(train_py if a == "{train.py}" else a for a in args), cwd=str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and len(proc.stderr.splitlines()) == 1 and needle in proc.stderr
    assert not (tmp_path / "outputs").exists()
