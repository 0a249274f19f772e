"""Checkpoints of an optimizer that holds no tensor state (plain SGD without momentum): full and sharded
formats resume and continue bitwise like the uninterrupted run (torch's full-state-dict loader needs a state
tensor to learn the device from and used to fail with "Expected device to be set")."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch

from foundry.checkpoint import CheckpointConfig, Checkpointer, load_into, resolve_start
from foundry.models import build_model
from foundry.train.loop import Trainer
from tests.foundry.checkpoint.runs import assert_bitwise_equal
from tests.foundry.checkpoint.trainers import MODEL, cpu_trainer, random_batches


def _trainer(max_steps: int, loader: list[dict[str, torch.Tensor]], *, seed: int = 0) -> Trainer:
    torch.manual_seed(seed)
    model = build_model(MODEL)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # no momentum: an empty optimizer state
    return cpu_trainer(model, optimizer, loader, max_steps=max_steps, microbatch=8)


@pytest.fixture(scope="module")
def reference() -> Trainer:
    ref = _trainer(4, random_batches(4))
    ref.fit()
    return ref


@pytest.mark.parametrize("fmt", ["full", "sharded"])
@pytest.mark.parametrize("at", [0, 2], ids=["before-first-step", "mid-run"])
def test_stateless_optimizer_checkpoint_resumes_bitwise(tmp_path, reference, fmt, at):
    batches = random_batches(4)
    first = _trainer(at, batches)
    first.fit()
    assert first.optimizer.state_dict()["state"] == {}
    cfg = CheckpointConfig(save_folder=str(tmp_path / "ckpts"))
    ckpt = Checkpointer(
        cfg, run_name="t", run_dir=str(tmp_path / "run"), every_steps=1, model_config=asdict(MODEL)
    )
    ckpt.save(first, fmt=fmt)
    ckpt.close()
    second = _trainer(4, batches[at:], seed=9)
    start = resolve_start(cfg, run_name="t", scratch=str(tmp_path / "scratch"))
    assert start is not None and start.info.manifest.format == fmt and start.info.manifest.step == at
    load_into(second, start, cfg=cfg, cache_root=str(tmp_path / "cache"), model_config=asdict(MODEL))
    assert second.state.step == at and second.optimizer.param_groups[0]["lr"] == 0.1
    second.fit()
    assert_bitwise_equal(second.model.state_dict(), reference.model.state_dict(), "model")


def test_array_state_into_a_stateless_optimizer_names_the_fix(tmp_path):
    model = build_model(MODEL)
    adam = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(**random_batches(1)[0]).loss.backward()
    adam.step()
    cfg = CheckpointConfig(save_folder=str(tmp_path / "ckpts"))
    tr = _trainer(1, random_batches(1))
    tr.model, tr.optimizer = model, adam
    ckpt = Checkpointer(
        cfg, run_name="t", run_dir=str(tmp_path / "run"), every_steps=1, model_config=asdict(MODEL)
    )
    ckpt.save(tr, fmt="full")
    ckpt.close()
    sgd = _trainer(2, random_batches(2))
    start = resolve_start(cfg, run_name="t", scratch=str(tmp_path / "scratch"))
    assert start is not None
    with pytest.raises(ValueError, match="SGD keeps none .* checkpoint.load_weights_only=true"):
        load_into(sgd, start, cfg=cfg, cache_root=str(tmp_path / "cache"), model_config=asdict(MODEL))
