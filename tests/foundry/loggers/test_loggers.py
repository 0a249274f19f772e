"""Console and JSONL loggers, the callbacks' metrics, and a real W&B offline run."""

from __future__ import annotations

import io
import math
from types import SimpleNamespace

import pytest
import torch

from foundry.callbacks import (
    LRMonitor,
    RuntimeEstimator,
    RuntimeEstimatorConfig,
    SpeedMonitor,
    SpeedMonitorConfig,
    peak_flops,
)
from foundry.loggers import ConsoleLogger, JsonlLogger, LoggerConfig, WandbConfig, build_loggers, read_metrics


def test_jsonl_round_trip_and_non_finite_values(tmp_path):
    log = JsonlLogger(tmp_path / "m.jsonl")
    log.log_metrics({"train/loss": 1.5}, step=1)
    log.log_metrics({"eval/loss": math.inf}, step=2)
    log.close()
    assert read_metrics(tmp_path / "m.jsonl") == [
        {"step": 1, "train/loss": 1.5},
        {"step": 2, "eval/loss": None},
    ]


def test_console_lines_without_bar():
    out = io.StringIO()
    log = ConsoleLogger(max_steps=10, progress_bar=False, stream=out)
    log.log_metrics({"train/loss": 2.0, "lr-AdamW/group0": 1e-3, "throughput/tokens_per_sec": 1234.0}, step=3)
    log.log_metrics({"eval/loss": 1.0, "eval/perplexity": math.e}, step=3)
    text = out.getvalue()
    assert "step 3/10" in text and "loss=2.0000" in text and "lr=1.00e-03" in text and "tok/s=1,234" in text
    assert "[eval] step 3/10: eval/loss=1.0000 eval/perplexity=2.7183" in text


def test_console_bar_shows_eta():
    out = io.StringIO()
    log = ConsoleLogger(max_steps=4, progress_bar=True, stream=out)
    for step in range(1, 5):
        log.log_metrics({"train/loss": 1.0}, step=step)
    log.close()
    assert "4/4" in out.getvalue()


def test_build_loggers_respects_flags(tmp_path):
    loggers = build_loggers(
        LoggerConfig(console=False, jsonl=True), run_dir=tmp_path, run_name="r", max_steps=1
    )
    assert [type(x).__name__ for x in loggers] == ["JsonlLogger"]
    loggers[0].close()


def _trainer_stub(**kw):
    plan = SimpleNamespace(device_batch_size=4, global_batch_size=4)
    model = SimpleNamespace(flops_per_token=lambda s: 1e6)
    base = {"plan": plan, "max_seq_len": 8, "device": torch.device("cpu"), "model": model, "cfg": None}
    return SimpleNamespace(**{**base, **kw})


def test_speed_monitor_throughput_and_mfu_with_known_peak():
    cb = SpeedMonitor(SpeedMonitorConfig(window_size=2, peak_flops=1e9), world_size=1)
    tr = _trainer_stub()
    cb.on_fit_start(tr)
    cb.on_step_end(tr, step_seconds=1.0)
    m = cb.on_step_end(tr, step_seconds=1.0)
    assert m["throughput/samples_per_sec"] == 4 and m["throughput/tokens_per_sec"] == 32
    assert m["throughput/device/mfu"] == pytest.approx(32 * 1e6 / 1e9)


def test_no_mfu_on_cpu_without_a_peak():
    cb = SpeedMonitor(SpeedMonitorConfig(), world_size=1)
    tr = _trainer_stub()
    cb.on_fit_start(tr)
    assert "throughput/device/mfu" not in cb.on_step_end(tr, step_seconds=0.5)


@pytest.mark.parametrize(
    ("name", "precision", "peak"),
    [("NVIDIA H100 80GB HBM3", "amp_bf16", 989.5e12), ("NVIDIA H100 PCIe", "amp_bf16", 756.5e12),
     ("NVIDIA H200", "amp_bf16", 989.5e12), ("NVIDIA A100-SXM4-80GB", "amp_bf16", 312e12),
     ("NVIDIA A10G", "amp_bf16", 125e12), ("Some GPU", "amp_bf16", None)],
)  # fmt: skip
def test_peak_flops_table(name, precision, peak):
    assert peak_flops(name, precision) == peak


def test_lr_monitor_names_optimizer_and_groups():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([{"params": [p], "lr": 0.1}, {"params": [], "lr": 0.2}])
    assert LRMonitor().on_step_end(SimpleNamespace(optimizer=opt), step_seconds=0) == {
        "lr-AdamW/group0": 0.1,
        "lr-AdamW/group1": 0.2,
    }


def test_runtime_estimator_excludes_eval_time(monkeypatch):
    clock = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr("foundry.callbacks.monitors.time.perf_counter", lambda: next(clock))
    cb = RuntimeEstimator(RuntimeEstimatorConfig(skip_steps=1))
    state = SimpleNamespace(step=1)
    tr = SimpleNamespace(state=state, max_steps=11, eval_interval_steps=0)
    assert cb.on_step_end(tr, step_seconds=1) == {}
    state.step = 2
    cb.on_eval_end(tr, eval_seconds=5.0)
    m = cb.on_step_end(tr, step_seconds=1)  # 10 s elapsed, 5 s of it eval -> 5 s/step, 9 steps left
    assert m["time/remaining_estimate"] == pytest.approx(45 / 3600)


def test_wandb_offline_run_writes_its_files(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from foundry.loggers.wandb import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    log = WandbLogger(WandbConfig(project="test"), run_name="my-run", run_dir=tmp_path)
    log.log_hyperparameters({"config": {"optimizer": {"lr": 1e-3}}})
    for step in range(1, 4):
        log.log_metrics({"train/loss": 1.0 / step}, step=step)
    assert log.run.name == "my-run"
    log_id = log.run.id
    log.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("run-*.wandb"))
    resumed = WandbLogger(WandbConfig(project="test"), run_name="my-run", run_dir=tmp_path, run_id=log_id)
    assert resumed.run.id == log_id, "a resumed training run continues the W&B run its checkpoint recorded"
    resumed.close()


def test_speed_monitor_reports_global_throughput_over_ranks():
    tr = _trainer_stub(plan=SimpleNamespace(device_batch_size=4, global_batch_size=8))  # 2 ranks
    sm = SpeedMonitor(SpeedMonitorConfig(window_size=2, peak_flops=None), world_size=2)
    sm.on_fit_start(tr)
    out = sm.on_step_end(tr, step_seconds=1.0)
    assert out["throughput/tokens_per_sec"] == 2 * out["throughput/device/tokens_per_sec"]
