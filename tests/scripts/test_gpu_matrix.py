"""scripts/bench/gpu_matrix.py on CPU: one line per configuration, the same losses as eager, errors as lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bench" / "gpu_matrix.py"
sys.path.insert(0, str(SCRIPT.parent))

import gpu_matrix  # noqa: E402


def test_batches_are_seeded_and_learnable():
    a = gpu_matrix.batches(2, batch=3, seq=50, vocab=97)
    b = gpu_matrix.batches(2, batch=3, seq=50, vocab=97)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], a[1])
    # 90% of the tokens follow their predecessor's fixed successor: a bigram table predicts them
    ids = torch.cat(a)
    pairs = {}
    for row in ids.tolist():
        for prev, nxt in zip(row, row[1:], strict=False):
            pairs.setdefault(prev, []).append(nxt)
    hits = sum(max(v.count(x) for x in set(v)) for v in pairs.values())
    assert hits / sum(len(v) for v in pairs.values()) > 0.85


def test_compare_adds_the_loss_check_against_eager():
    row = {"losses": [2.0, 1.1], "tokens_per_s": 300.0}
    gpu_matrix.compare(row, {"losses": [2.0, 1.0], "tokens_per_s": 100.0})
    assert row["loss_vs_eager_max_rel_diff"] == pytest.approx(0.1)
    assert row["final_loss_vs_eager_rel_diff"] == pytest.approx(0.1)
    assert row["tokens_per_s_vs_eager"] == 3.0
    failed = {"error": "ValueError: x"}
    gpu_matrix.compare(failed, {"losses": [1.0], "tokens_per_s": 1.0})
    assert failed == {"error": "ValueError: x"}


@pytest.mark.slow
def test_cpu_run_reports_every_configuration_and_goes_on_after_errors():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--sizes", "mpt-tiny", "--steps", "6",
         "--configs", "eager", "compiled", "fused", "liger", "fp8", "--long-steps", "6", "--long-size", "mpt-tiny"],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    rows = {r["config"]: r for r in lines if "config" in r}
    assert list(rows) == ["eager", "compiled", "fused", "liger", "fp8"]
    for name in ("compiled", "fused"):
        assert rows[name]["loss_vs_eager_max_rel_diff"] < 1e-5, rows[name]
        assert rows[name]["tokens_per_s"] > 0
    assert rows["eager"]["losses"][-1] < rows["eager"]["losses"][0]
    assert "needs CUDA" in rows["liger"]["error"]
    assert "FP8 tensor cores" in rows["fp8"]["error"]  # reported, and the long run still ran after it
    long = next(r for r in lines if "long_run" in r)
    assert long["bf16_tokens_per_s"] > 0 and "FP8 tensor cores" in long["fp8_error"]
    assert "Traceback" not in proc.stderr


def _make_n(*args: str) -> str:
    return subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


def test_gpu_check_needs_no_venv_and_installs_the_carried_wheels_first(tmp_path):
    out = _make_n(f"VENV={tmp_path / 'none'}", "gpu-check")
    assert "make install" not in out and str(tmp_path) not in out  # the GPU machine has no .venv
    install = out.index(
        "pip install -q --no-index --no-deps --no-compile --target .gpu-site .gpu-wheels/*.whl"
    )
    assert install < out.index("python3 scripts/bench/gpu_check.py")
    assert "PYTHONPATH=" in out and "/src:" in out


def test_gpu_wheels_fetches_what_the_gpu_image_lacks_for_python_3_12():
    out = _make_n("gpu-wheels")
    for pkg in (
        "hydra-core==",
        "omegaconf==",
        "zstandard==",
        "torchao==",
        "liger-kernel==",
        "antlr4-python3-runtime==",
    ):
        assert pkg in out, pkg
    assert "--python-version 3.12" in out and "--only-binary=:all:" in out


@pytest.mark.slow
def test_gpu_check_reports_each_failed_step_and_goes_on():
    """On CPU both steps fail (no CUDA): each is its own line and the run ends with the count, exit 1."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "gpu_check.py"), "--only", "overhead", "fsdp-bf16"],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    rows = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith('{"check"')]
    assert [r["check"] for r in rows] == ["start", "overhead", "fsdp-bf16", "done"]
    assert not rows[1]["ok"] and not rows[2]["ok"] and rows[1]["error"] and rows[2]["error"]
    assert rows[-1] == {"check": "done", "passed": 0, "failed": 2}
    assert proc.returncode == 1
