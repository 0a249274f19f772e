"""scripts/bench/failure_recovery.py end to end (one short crash case): the JSON line it prints adds up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.dist]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "failure_recovery.py"


def test_crash_case_prints_the_time_lost():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--cases", "crash", "--steps", "16", "--every", "5", "--at", "8"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    (line,) = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert "error" not in line, line
    assert line["case"] == "crash" and line["cause"] == "exited" and line["launcher_exit"] == 0
    assert line["resumed_step"] == 5 and line["work_lost_steps"] >= line["injected_at_step"] - 5 >= 3
    assert 0 <= line["detection_s"] < 5 and line["restart_to_first_step_s"] > 0
    parts = line["detection_s"] + line["restart_to_first_step_s"] + line["work_lost_s"]
    assert line["total_lost_s"] == pytest.approx(parts, abs=0.01)
    assert line["cores"] and line["torch"]
