"""scripts/bench/gpu_matrix.py on CPU: one line per configuration, the same losses as eager, errors as lines;
the time budget's estimates; the long run inside the matrix; gpu_warm.py filling the compile cache; scripts/bench/gpu_check.py's step commands and limits; make gpu-check / gpu-wheels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bench" / "gpu_matrix.py"
sys.path.insert(0, str(SCRIPT.parent))

import fused_loss  # noqa: E402
import gpu_check  # noqa: E402
import gpu_matrix  # noqa: E402
import gpu_warm  # noqa: E402
import trainer_overhead  # noqa: E402


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
    # a large vocabulary: the chain runs over `active` ids of it (the unigram alone is learnt in a few steps)
    big = torch.cat(gpu_matrix.batches(3, batch=2, seq=300, vocab=50368, active=64))
    assert big.shape == (6, 300) and len(big.unique()) == 64 and int(big.max()) < 50368


def _row(case: str, config: str, *, step_s: float, first: float, seconds: float, steps: int = 50) -> dict:
    return {"case": case, "config": config, "step_s": step_s, "first_step_s": first, "seconds": seconds,
            "steps": steps}  # fmt: skip


def test_estimates_come_from_the_rows_measured_so_far():
    est = gpu_matrix.estimate_s
    assert est("mpt-1b", "eager", [], steps=50) == 0.0  # nothing measured: it just starts
    assert est("mpt-1b", "eager", [{"case": "mpt-1b", "config": "eager", "error": "x"}], steps=50) == 0.0
    eager = _row("mpt-1b", "eager", step_s=0.3, first=1.3, seconds=1.3 + 49 * 0.3 + 4.0)
    assert est("mpt-1b", "eager", [eager], steps=50) == pytest.approx(4.0 + 1.0 + 50 * 0.3)
    # a compiled config before any compile was measured: the guess; after one: the longest compile seen
    assert est("mpt-1b", "compiled", [eager], steps=50) == pytest.approx(4.0 + 60.0 + 50 * 0.3)
    compiled = _row("mpt-1b", "compiled", step_s=0.25, first=30.25, seconds=30.25 + 49 * 0.25 + 2.0)
    assert est("mpt-1b", "fp8", [eager, compiled], steps=50) == pytest.approx(4.0 + 30.0 + 50 * 0.3)
    # another size: the slowest step seen, scaled by FLOPs per step
    ratio = gpu_matrix.flops_per_step("mpt-350m") / gpu_matrix.flops_per_step("mpt-1b")
    assert 0.3 < ratio < 0.8  # 350m at micro batch 16 vs 1b at 8
    assert est("mpt-350m", "eager", [eager, compiled], steps=50) == pytest.approx(
        4.0 + 1.0 + 50 * 0.3 * ratio
    )


def test_skip_only_what_would_end_past_the_budget():
    assert gpu_matrix.skip({"case": "a"}, 100.0, 50.0, 200.0) is None
    assert gpu_matrix.skip({"case": "a"}, 100.0, 0.0, 200.0) is None
    row = gpu_matrix.skip({"case": "a"}, 100.0, 150.0, 200.0)
    assert row is not None and row["case"] == "a" and "time budget" in row["skipped"]
    assert gpu_matrix.skip({}, 201.0, 0.0, 200.0) is not None


def test_gpu_check_commands_parse():
    """Every gpu_check step that runs a bench script passes arguments that script accepts."""
    parsed = {}
    for name, cmd, _limit in gpu_check.steps(sys.executable):
        script = Path(cmd[1]).name if len(cmd) > 1 else ""
        if script == "gpu_matrix.py":
            parsed[name] = gpu_matrix.parser().parse_args([*cmd[2:], "--budget-s", "100"])
        elif script == "trainer_overhead.py":
            parsed[name] = trainer_overhead.parser().parse_args(cmd[2:])
        elif script == "fused_loss.py":
            parsed[name] = fused_loss.parser().parse_args(cmd[2:])
    matrix = parsed["matrix"]
    assert matrix.sizes == ["mpt-1b", "mpt-125m", "mpt-350m", "mpt-3b"]
    assert matrix.configs == gpu_check.MATRIX_CONFIGS and matrix.steps == 30
    assert matrix.long_steps == 200 and matrix.long_size == "mpt-1b"
    assert matrix.long_configs == ["cudnn", "fp8-cudnn"]  # what trainer.speed=auto runs at 1b, bf16 and FP8
    ov = parsed["overhead"]
    assert ov.gpu and ov.compile == "blocks" and ov.loss_fn == "chunked_crossentropy"
    loss = parsed["loss"]
    assert loss.device == "cuda" and loss.compile and loss.dtype == "bf16"
    # one warm-up per matrix size x block graph, each parsed by gpu_warm.py
    warm = [gpu_warm.parser().parse_args(cmd[2:]) for cmd in gpu_check.warm_commands(sys.executable)]
    got = {(a.sizes[0], a.configs[0]) for a in warm}
    want = set(gpu_warm.warm_targets(matrix.sizes, matrix.configs))
    assert got == want and len(want) == 11


def test_warm_targets_one_per_block_graph():
    """The loss is outside the block graph; the FP8 recipe, the attention kernel and the micro-batch are not."""
    assert gpu_warm.warm_targets(["mpt-1b"], ["eager", "compiled", "fused", "liger", "fp8"]) == [
        ("mpt-1b", "compiled"),
        ("mpt-1b", "fp8"),
    ]
    assert gpu_warm.warm_targets(["mpt-1b", "mpt-125m"], ["eager", "compiled"]) == [
        ("mpt-1b", "compiled"),
        ("mpt-125m", "compiled"),
    ]
    assert gpu_warm.warm_targets(["mpt-1b"], ["eager"]) == []
    configs = [
        "cudnn",
        "fused-cudnn",
        "cudnn@x2",
        "cudnn@16",
        "fp8-cudnn",
        "fp8-rowwise",
        "mpt-125m:fp8-fused-cudnn",
    ]
    assert gpu_warm.warm_targets(["mpt-1b", "mpt-125m"], configs) == [
        ("mpt-1b", "cudnn"),  # fused-cudnn: the same blocks
        ("mpt-1b", "cudnn@x2"),  # cudnn@16 = cudnn@x2 at 1b (micro-batch 8)
        ("mpt-1b", "fp8-cudnn"),
        ("mpt-1b", "fp8-rowwise"),
        ("mpt-125m", "cudnn"),
        ("mpt-125m", "cudnn@x2"),
        ("mpt-125m", "cudnn@16"),
        ("mpt-125m", "fp8-cudnn"),  # fp8-fused-cudnn: the same blocks
        ("mpt-125m", "fp8-rowwise"),
    ]


def test_config_names_micro_batches_and_sizes():
    assert gpu_matrix.micro_batch("mpt-1b", "cudnn") == 8
    assert (
        gpu_matrix.micro_batch("mpt-1b", "cudnn@x2") == 16
        and gpu_matrix.micro_batch("mpt-125m", "cudnn@x2") == 64
    )
    assert gpu_matrix.micro_batch("mpt-1b", "mpt-1b:fp8-cudnn@12") == 12
    assert gpu_matrix.spec("mpt-1b:fp8-rowwise@x2") == gpu_matrix.CONFIGS["fp8-rowwise"]
    assert gpu_matrix.for_size("mpt-1b", ["cudnn", "mpt-1b:fp8@x2", "mpt-3b:eager"]) == ["cudnn", "fp8@x2"]
    p = gpu_matrix.parser()
    for bad in ("fast", "cudnn@0", "cudnn@xx", "mpt-9b:cudnn"):
        with pytest.raises(SystemExit):
            p.parse_args(["--configs", bad])
    assert p.parse_args(["--configs", "mpt-3b:fp8-cudnn@x2"]).configs == ["mpt-3b:fp8-cudnn@x2"]


def test_an_out_of_memory_at_a_larger_micro_batch_is_a_measurement_not_a_failure():
    cuda = torch.device("cuda")
    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 3.0 GiB"
    assert gpu_matrix._expected_error({"config": "cudnn@x2", "error": oom}, cuda)
    assert not gpu_matrix._expected_error({"config": "cudnn", "error": oom}, cuda)
    assert not gpu_matrix._expected_error({"config": "fp8-cudnn", "error": "ValueError: x"}, cuda)
    assert gpu_matrix._expected_error({"config": "fp8-cudnn", "error": "ValueError: x"}, torch.device("cpu"))


def test_plan_runs_the_long_halves_inside_the_matrix():
    def plan(*argv: str) -> list:
        return gpu_matrix.plan(gpu_matrix.parser().parse_args(list(argv)))

    long = ["--long-configs", "fused", "fp8"]
    assert plan("--sizes", "mpt-1b", "mpt-125m", "--long-steps", "200", "--long-size", "mpt-1b", *long) == [
        ("mpt-1b", [("eager", 50), ("compiled", 50), ("fused", 200), ("fp8", 200)]),
        ("mpt-125m", [("eager", 50), ("compiled", 50), ("fused", 50), ("fp8", 50)]),
    ]
    assert plan(
        "--sizes", "mpt-125m", "--configs", "eager", "--long-steps", "20", "--steps", "30", *long
    ) == [
        ("mpt-125m", [("eager", 30)]),
        ("mpt-1b", [("fused", 30), ("fp8", 30)]),  # never fewer than --steps
    ]
    assert plan("--sizes", "--long-steps", "200") == [("mpt-1b", [("cudnn", 200), ("fp8-cudnn", 200)])]
    assert plan(
        "--sizes", "mpt-1b", "--configs", "mpt-1b:fp8-cudnn@x2", "mpt-3b:eager", "--long-steps", "100"
    ) == [("mpt-1b", [("fp8-cudnn@x2", 50), ("cudnn", 100), ("fp8-cudnn", 100)])]
    assert plan("--sizes", "mpt-1b", "--configs", "eager") == [("mpt-1b", [("eager", 50)])]


def test_a_long_half_that_would_not_fit_runs_the_matrix_steps_and_the_long_line_says_so(monkeypatch, capsys):
    def fake(size, config, data, *, device):
        n = len(data)
        return {"case": size, "config": config, "losses": [5.0] * n, "tokens_per_s": 10.0, "first_step_s": 0.1,
                "step_s": 0.1, "steps": n, "seconds": 0.1 * n}  # fmt: skip

    monkeypatch.setattr(gpu_matrix, "attempt", fake)
    monkeypatch.setattr(
        gpu_matrix, "estimate_s", lambda size, config, done, *, steps: 1000.0 if steps > 2 else 0.0
    )
    argv = ["--device", "cpu", "--sizes", "mpt-tiny", "--configs", "eager", "fused", "fp8", "--steps", "2",
            "--long-steps", "10", "--long-size", "mpt-tiny", "--budget-s", "100", "--long-configs", "fused",
            "fp8"]  # fmt: skip
    assert gpu_matrix.main(argv) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    rows = {r["config"]: r for r in lines if "config" in r}
    # not skipped: the usual 2 steps
    assert [rows[c]["steps"] for c in ("eager", "fused", "fp8")] == [2, 2, 2]
    long = next(r for r in lines if "long_run" in r)
    assert long["bf16_skipped"] == long["fp8_skipped"] == "time budget: ran 2 steps, not 10"
    assert "final_loss_rel_diff" not in long


def test_finish_warm_reports_each_graph_and_kills_stragglers(tmp_path):
    line = json.dumps({"warm": "mpt-1b", "config": "fused", "fxgraph_cache": {"hit": 0, "miss": 2}})
    commands = [
        [sys.executable, "-c", f"print({line!r})"],
        [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"],
        [sys.executable, "-c", "import time; time.sleep(120)"],
    ]
    start = time.monotonic()
    procs = gpu_check.start_warm(commands, tmp_path / "logs")
    time.sleep(2.0)
    row = gpu_check.finish_warm(procs, time.monotonic() + 1.0, start)
    assert time.monotonic() - start < 30
    assert row["check"] == "warm" and row["ok"] is False
    assert row["graphs"] == [json.loads(line)]
    assert row["errors"] == ["boom"] and "1 still compiling" in row["killed"]
    assert procs[2][0].poll() is not None  # the straggler is gone


def test_a_silent_step_is_killed_at_its_limit_with_its_children(tmp_path, capsys):
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    parent = (
        f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(120)"
    )
    start = time.monotonic()
    assert gpu_check.run_step("silent", [sys.executable, "-c", parent], 3.0) is False
    assert time.monotonic() - start < 30
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["check"] == "silent" and row["rc"] == 124 and "limit" in row["error"]
    pid = int(pid_file.read_text())
    for _ in range(50):  # gone, or a zombie waiting for init
        stat = Path(f"/proc/{pid}/stat")
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        raise AssertionError("the step's child outlived the step")


def test_gpu_check_runs_nothing_past_its_total(capsys):
    """With no time left every step is a `not run` line (counted as failed), and the exit code is 1."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "gpu_check.py"), "--total-s", "0", "--only", "matrix", "overhead"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    rows = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith('{"check"')]
    assert [r["check"] for r in rows] == ["start", "matrix", "overhead", "done"]
    assert all("not run" in r["error"] for r in rows[1:3])
    assert rows[-1] == {"check": "done", "passed": 0, "failed": 2} and proc.returncode == 1


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
         "--configs", "eager", "compiled", "fused", "liger", "fp8", "--long-steps", "8", "--long-size", "mpt-tiny",
         "--long-configs", "fused", "fp8"],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    rows = {r["config"]: r for r in lines if "config" in r}
    assert list(rows) == ["eager", "compiled", "fused", "liger", "fp8"]
    for name in ("compiled", "fused"):
        assert rows[name]["loss_vs_eager_max_rel_diff"] < 1e-5, rows[name]
        assert rows[name]["tokens_per_s"] > 0 and rows[name]["fxgraph_cache"]["hit"] >= 0
    # the long run's bf16 half is the fused configuration, run for --long-steps; checked on eager's 6
    assert len(rows["eager"]["losses"]) == 6 and len(rows["fused"]["losses"]) == 8
    assert rows["fused"]["loss_check_steps"] == 6 and len(rows["compiled"]["losses"]) == 6
    assert rows["eager"]["losses"][-1] < rows["eager"]["losses"][0]
    for row in rows.values():
        assert row["device"] == "cpu" and row["torch"] == torch.__version__ and row["seconds"] >= 0
    assert "needs CUDA" in rows["liger"]["error"]
    assert "FP8 tensor cores" in rows["fp8"]["error"]  # reported, and the long run still ran after it
    long = next(r for r in lines if "long_run" in r)
    assert (
        long["bf16_tokens_per_s"] == rows["fused"]["tokens_per_s"] and "FP8 tensor cores" in long["fp8_error"]
    )
    assert long["bf16_curve_every_10"] == [rows["fused"]["losses"][0], rows["fused"]["losses"][-1]]
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_warmed_block_graph_compiles_from_the_cache_in_the_matrix(tmp_path):
    """gpu_warm.py's one-block model fills the cache; the matrix's 2-block models then compile their block graph
    from it: the fused row (blocks + the chunked loss's chunk graphs, both warmed) with no miss, the compiled row
    with hits and only the plain loss's 2 graphs (forward, backward: the warm-up does not hold full logits)."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}

    def lines(script: str, *argv: str) -> list[dict]:
        proc = subprocess.run([sys.executable, str(SCRIPT.parent / script), "--device", "cpu", *argv],
                              capture_output=True, text=True, timeout=600, cwd=REPO, env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]

    (warm,) = lines("gpu_warm.py", "--sizes", "mpt-tiny", "--configs", "eager", "compiled")
    assert warm["warm"] == "mpt-tiny" and warm["config"] == "compiled" and warm["fxgraph_cache"]["miss"] > 0
    rows = lines("gpu_matrix.py", "--sizes", "mpt-tiny", "--steps", "4", "--configs", "fused", "compiled")
    fused, compiled = rows[1:]
    assert fused["fxgraph_cache"]["miss"] == 0 and fused["fxgraph_cache"]["hit"] > 0, fused
    assert compiled["fxgraph_cache"]["miss"] == 2 and compiled["fxgraph_cache"]["hit"] > 0, compiled


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
