"""`make help`: every target with its `## ` text, the texts in one column however long the target names."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_help_lists_every_target_in_aligned_columns():
    out = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    rows = [re.match(r"  (\S+)( +)\S", line) for line in out.splitlines()]
    assert rows and all(rows), out
    documented = re.findall(r"^([a-zA-Z_-]+):.*## ", (REPO / "Makefile").read_text(), flags=re.M)
    assert [r.group(1) for r in rows if r] == documented
    columns = {r.end(2) for r in rows if r}
    assert len(columns) == 1, out  # every description starts in the same column
    assert max(len(name) for name in documented) > 12  # the widths this test guards against


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("suite", ["offline", "light", "gauntlet-v0.3"])
def test_each_eval_suite_has_its_own_run_folder(suite):
    """`make eval EVAL=light` used to write outputs/eval, replacing the offline suite's icl_results.md."""
    out = subprocess.run(
        ["make", "-n", "eval", f"EVAL={suite}", "CKPT=x"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"eval={suite} run_name=eval-{suite} " in out, out


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("target", ["test", "train"])
def test_make_train_and_test_create_a_missing_environment_first(tmp_path, target):
    """Issue 26 item 14: on a fresh clone `make train` / `make test` do the whole set-up (a dry run here)."""
    venv = tmp_path / "venv"
    out = subprocess.run(
        ["make", "-n", f"VENV={venv}", target], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    run = {"test": f"{venv}/bin/python -m pytest", "train": f"{venv}/bin/python train.py"}[target]
    steps = ["running make install first", f"python3 -m venv {venv}", "pip install -r requirements/dev.lock",
             "pip install --no-deps -e .", run]  # fmt: skip
    positions = [out.find(s) for s in steps]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), out
    assert not venv.exists()  # a dry run: nothing was installed
