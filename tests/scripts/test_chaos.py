"""scripts/bench/chaos.py, the 5-fault version (issue 27): one of each kind of process and store fault in one
supervised 2-rank run checkpointing to S3 through a fault proxy; the final state is bitwise that of an
uninterrupted run and no fault needed a human."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.dist]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "chaos.py"


def test_five_faults_leave_the_final_state_bitwise_equal():
    if not Path(sys.executable).with_name("moto_server").exists():
        pytest.skip("moto[server] is not installed")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--faults", "5", "--steps", "700", "--every", "50", "--outage", "2", "5"],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    summary = lines[-1]
    faults = [line["fault"] for line in lines[:-1]]
    assert summary["faults_injected"] == 5 and len({f["kind"] for f in faults}) == 5
    assert summary["bitwise_equal"], summary
    assert not summary["needed_a_human"] and summary["launcher_exits"][-1] == 0
    assert all(f["recovered"] is not None for f in faults), faults
    assert 0 < summary["effective_training_time"] <= summary["reference_effective_training_time"] * 1.2
