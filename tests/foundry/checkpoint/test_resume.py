"""`checkpoint.load_path` from another model size (`foundry.checkpoint.resume.load_into`): the error names the
config differences from the checkpoint's manifest and offers `load_strict=false` only when it can help."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest
import torch

from foundry.checkpoint import CheckpointConfig, Checkpointer, load_into, resolve_start
from foundry.errors import ConfigError
from foundry.models import MPTModelConfig, build_model
from foundry.optim import AdamWConfig, build_optimizer
from foundry.train.batching import BatchPlan
from foundry.train.config import TrainerConfig
from foundry.train.loop import Trainer

SAVED = MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64)


def _trainer(model_cfg: MPTModelConfig, max_steps: int = 1) -> Trainer:
    torch.manual_seed(0)
    model = build_model(model_cfg)
    g = torch.Generator().manual_seed(1)
    batches = [{"input_ids": (ids := torch.randint(0, 64, (4, 16), generator=g)), "labels": ids.clone()}]
    return Trainer(
        model=model,
        optimizer=build_optimizer(AdamWConfig(lr=1e-3), model=model),
        scheduler=None,
        train_loader=batches * max_steps,
        eval_loader=None,
        cfg=TrainerConfig(global_train_batch_size=4, device="cpu", precision="fp32", progress_bar=False),
        plan=BatchPlan(4, 4, 4, False),
        max_steps=max_steps,
        eval_interval_steps=0,
        max_seq_len=16,
        device=torch.device("cpu"),
    )


@pytest.fixture(scope="module", params=["full", "sharded"])
def checkpoint(request, tmp_path_factory) -> str:
    """A 2-layer checkpoint saved by the trainer after one step (`<folder>/ep0-ba1`)."""
    folder = tmp_path_factory.mktemp(f"ckpt-{request.param}")
    trainer = _trainer(SAVED)
    trainer.fit()
    cfg = CheckpointConfig(save_folder=str(folder / "ckpts"), async_upload=False)
    ckpt = Checkpointer(
        cfg, run_name="t", run_dir=str(folder / "run"), every_steps=1, model_config=asdict(SAVED)
    )
    ckpt.save(trainer, fmt=request.param)
    ckpt.close()
    return str(folder / "ckpts" / "ep0-ba1")


def _load(checkpoint: str, model_cfg: MPTModelConfig, tmp_path, *, strict: bool = True) -> Trainer:
    cfg = CheckpointConfig(load_path=checkpoint, load_weights_only=True, load_strict=strict)
    start = resolve_start(cfg, run_name="new", scratch=str(tmp_path / "scratch"))
    assert start is not None and start.source == "load_path"
    trainer = _trainer(model_cfg)
    load_into(trainer, start, cfg=cfg, cache_root=str(tmp_path / "c"), model_config=asdict(model_cfg))
    return trainer


def test_more_layers_than_the_checkpoint_names_n_layers_and_offers_a_non_strict_load(checkpoint, tmp_path):
    deeper = replace(SAVED, n_layers=4)
    with pytest.raises(ConfigError) as info:
        _load(checkpoint, deeper, tmp_path)
    text = str(info.value)
    assert "model.n_layers: checkpoint 2, config 4" in text, text
    assert "missing from the checkpoint" in text and "blocks.2" in text, text
    assert "pass checkpoint.load_strict=false" in text, text
    trainer = _load(checkpoint, deeper, tmp_path, strict=False)  # the advice works: the 2 shared layers load
    saved = _trainer(SAVED)
    saved.fit()
    torch.testing.assert_close(
        trainer.model.state_dict()["transformer.blocks.1.ffn.up_proj.weight"],
        saved.model.state_dict()["transformer.blocks.1.ffn.up_proj.weight"],
    )


@pytest.mark.parametrize("strict", [True, False])
def test_another_width_names_d_model_and_does_not_offer_a_non_strict_load(checkpoint, tmp_path, strict):
    wider = replace(SAVED, d_model=64)
    with pytest.raises(ConfigError) as info:
        _load(checkpoint, wider, tmp_path, strict=strict)
    text = str(info.value)
    assert "model.d_model: checkpoint 32, config 64" in text, text
    assert "of another shape" in text, text
    assert "attn.Wqkv.weight: checkpoint (96, 32), model (192, 64)" in text, text
    assert "pass checkpoint.load_strict=false" not in text, text
    assert "\n" not in text


def test_the_warning_for_a_damaged_local_checkpoint_masks_a_secret_in_its_path(tmp_path, monkeypatch, capsys):
    """Found by `tests/fuzz` (issue 39): the damaged file's own path was printed unmasked."""
    from foundry.checkpoint import CheckpointStore
    from foundry.checkpoint.layout import find_checkpoints
    from foundry.checkpoint.resume import newest_intact
    from tests.foundry.checkpoint.test_checkpointer import _one_checkpoint

    secret = "s3cr3t-value-5678"
    monkeypatch.setenv("FUZZ_API_TOKEN", secret)
    _one_checkpoint(tmp_path / secret)
    ckpts = tmp_path / secret / "ckpts"
    model_pt = ckpts / "ep0-ba1" / "model.pt"
    data = bytearray(model_pt.read_bytes())
    data[len(data) // 2] ^= 0x01
    model_pt.write_bytes(bytes(data))
    capsys.readouterr()
    found = find_checkpoints(CheckpointStore(str(ckpts)), scratch=str(tmp_path / "scratch"))
    assert newest_intact(found, warn=True) is None
    err = capsys.readouterr().err
    assert "autoresume skips" in err and "model.pt: does not match" in err and secret not in err
