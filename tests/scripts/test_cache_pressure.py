"""scripts/bench/cache_pressure.py, short: 2 jobs x 2 workers share one cache on a loopback S3 server under a
two-batches limit and the tightest accepted limit (and the two unlimited baselines, shared and one folder per
job); no hang, no crash, every sample right, the ceiling held."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "cache_pressure.py"


@pytest.mark.slow
def test_short_pressure_run_holds_the_ceiling_with_no_hang_crash_or_wrong_sample():
    pytest.importorskip("moto")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--jobs", "2", "--workers", "2", "--samples", "900", "--epochs", "1",
         "--job-timeout", "240"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    passes = {r["pass"]: r for r in rows if "pass" in r}
    (summary,) = [r for r in rows if r.get("summary")]
    assert set(passes) == {"unlimited", "unlimited_private", "two_batches", "tight"}
    assert "two_batches_iter_cost" in summary and "two_batches_iter_cost_vs_private" in summary
    assert all(r["samples_per_s"] > 0 and r["disk_samples"] > 0 for r in passes.values()), rows
    for key in ("hangs", "crashes", "wrong", "missing", "duplicates"):
        assert summary[key] == 0, (key, rows)
    assert summary["max_disk_over_limit"] <= 1.0, rows
    assert summary["machine"]["cores"] and len(summary["load_avg"]) == 3


def test_the_floor_is_the_fewest_downloads_at_the_unlimited_cost_of_one(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    from cache_pressure import floor_cost

    medians = {
        "unlimited": {"samples_per_s": 1000.0, "gets": 100},  # 1 ms a sample
        "unlimited_private": {"samples_per_s": 500.0, "gets": 300},  # +1 ms a sample for 200 more GETs
    }
    # 100 shards, 500 downloads at best: 400 more, 2 ms more a sample: 1 - 1/3
    assert floor_cost(medians, best=500, shards=100) == 0.667
    assert floor_cost(medians, best=100, shards=100) == 0.0
    assert floor_cost({"unlimited": medians["unlimited"]}, best=500, shards=100) is None
