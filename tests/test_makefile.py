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
