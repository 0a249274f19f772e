"""The TensorBoard logger: event files read back with TensorBoard's own `EventAccumulator`."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from foundry.loggers import LoggerConfig, TensorBoardConfig, build_loggers
from foundry.loggers.tensorboard import TensorBoardLogger, event_dir

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (
    EventAccumulator,
)

SECRET = "sk-live-0123456789abcdef"
PARAMS = {"config": {"optimizer": {"lr": 6e-4}, "hf_token": SECRET}, "derived": {"max_steps": 3}}


def read_events(folder: Path) -> EventAccumulator:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalars(acc: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def texts(acc: EventAccumulator, tag: str) -> list[str]:
    return [e.tensor_proto.string_val[0].decode() for e in acc.Tensors(tag)]


def _log(run_dir: Path, steps: range, *, resume_step: int | None = None, loss=lambda s: 1.0 / s) -> None:
    log = TensorBoardLogger(TensorBoardConfig(), run_dir=run_dir, resume_step=resume_step)
    log.log_hyperparameters(PARAMS)
    for step in steps:
        log.log_metrics({"train/loss": loss(step), "lr-AdamW/group0": 1e-4}, step=step)
    log.log_metrics({"eval/loss": math.inf}, step=max(steps))
    log.close()


def test_scalars_and_config_text_read_back(tmp_path):
    run_dir = tmp_path / "outputs" / "run-a"
    _log(run_dir, range(1, 4))
    acc = read_events(run_dir / "tensorboard")
    assert scalars(acc, "train/loss") == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    assert scalars(acc, "eval/loss") == [(3, math.inf)]
    assert set(acc.Tags()["scalars"]) == {"train/loss", "lr-AdamW/group0", "eval/loss"}
    (config,) = texts(acc, "config/text_summary")
    assert '"lr": 0.0006' in config and SECRET not in config and '"hf_token": "***"' in config
    assert '"max_steps": 3' in texts(acc, "derived/text_summary")[0]


def test_resume_purges_the_steps_logged_after_the_checkpoint(tmp_path):
    run_dir = tmp_path / "outputs" / "run-a"
    _log(run_dir, range(1, 6), loss=lambda s: 10.0 + s)  # the crashed run got to step 5; checkpoint at 3
    _log(run_dir, range(4, 7), resume_step=3, loss=lambda s: 20.0 + s)
    acc = read_events(run_dir / "tensorboard")
    assert scalars(acc, "train/loss") == [(1, 11.0), (2, 12.0), (3, 13.0), (4, 24.0), (5, 25.0), (6, 26.0)]


def test_one_folder_per_run_under_a_shared_log_dir(tmp_path):
    cfg = TensorBoardConfig(log_dir=str(tmp_path / "tb"))
    assert event_dir(cfg, tmp_path / "outputs" / "run-a") == tmp_path / "tb" / "run-a"
    assert event_dir(TensorBoardConfig(), tmp_path / "o" / "r") == tmp_path / "o" / "r" / "tensorboard"
    loggers = build_loggers(
        LoggerConfig(console=False, jsonl=False, tensorboard=cfg),
        run_dir=tmp_path / "outputs" / "run-a",
        run_name="run-a",
        max_steps=1,
    )
    loggers[0].log_metrics({"train/loss": 2.0}, step=1)
    loggers[0].close()
    assert scalars(read_events(tmp_path / "tb" / "run-a"), "train/loss") == [(1, 2.0)]


def test_missing_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were not installed
    cfg = LoggerConfig(console=False, jsonl=False, tensorboard=TensorBoardConfig())
    match = r"logger=tensorboard needs TensorBoard: pip install 'foundry-stack\[tensorboard\]'"
    with pytest.raises(ImportError, match=match):
        build_loggers(cfg, run_dir=tmp_path, run_name="r", max_steps=1)


def test_flush_secs_must_be_positive():
    with pytest.raises(ValueError, match="logger.tensorboard.flush_secs=0"):
        TensorBoardConfig(flush_secs=0)


def test_launcher_events_as_counters_and_text(tmp_path):
    from foundry.events import append_event

    run_dir = tmp_path / "outputs" / "run-a"
    append_event(run_dir, "start", run_name="run-a")
    append_event(run_dir, "failure", rank=1)
    log = TensorBoardLogger(TensorBoardConfig(), run_dir=run_dir)
    log.log_metrics({"train/loss": 1.0}, step=1)
    append_event(run_dir, "failure", rank=0)
    log.log_metrics({"train/loss": 0.5}, step=2)
    log.close()
    acc = read_events(run_dir / "tensorboard")
    assert scalars(acc, "launch/failures") == [(1, 1.0), (2, 2.0)]
    (text,) = texts(acc, "launch/events/text_summary")
    assert text.count('"event": "failure"') == 2
