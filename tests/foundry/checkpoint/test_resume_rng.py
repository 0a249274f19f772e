"""In-process exact resume with dropout: the RNG state a checkpoint restores is the uninterrupted run's.

A `StreamingDataLoader` used to draw its workers' base seed from torch's global RNG whenever an iterator was
created; a resumed run creates its first train iterator (and skips evals) at other points of the random stream
than the uninterrupted run, so every dropout mask after the resume differed.
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from foundry.checkpoint import CheckpointConfig, Checkpointer, load_into, resolve_start
from foundry.checkpoint.callback import CheckpointCallback
from foundry.models import MPTModelConfig, build_model
from foundry.models.mpt.schema import AttnConfig
from foundry.optim import AdamWConfig, build_optimizer
from foundry.train.loop import Trainer
from foundry.train.state import seed_all
from streaming.loader.dataloader import StreamingDataLoader
from streaming.reader.dataset import StreamingDataset
from tests.foundry.checkpoint.runs import assert_bitwise_equal
from tests.foundry.checkpoint.trainers import cpu_trainer
from tests.streaming.reader.test_dataset import write_ids

DROPOUT = MPTModelConfig(
    d_model=32,
    n_heads=2,
    n_layers=2,
    max_seq_len=16,
    vocab_size=64,
    resid_pdrop=0.1,
    emb_pdrop=0.1,
    attn_config=AttnConfig(attn_pdrop=0.1),
)
STEPS, AT = 4, 2


def _collate(samples: list[dict]) -> dict[str, torch.Tensor]:
    ids = torch.tensor([[(int(s["id"]) * 7 + j) % 64 for j in range(16)] for s in samples])
    return {"input_ids": ids, "labels": ids.clone()}


def _loader(data: str, *, shuffle: bool) -> StreamingDataLoader:
    ds = StreamingDataset(local=data, batch_size=8, shuffle=shuffle, num_canonical_nodes=1)
    return StreamingDataLoader(ds, batch_size=8, collate_fn=_collate, drop_last=True)


def _trainer(data: str) -> Trainer:
    """What a fresh process builds: seeded, then the model, optimizer and train loader."""
    seed_all(17)
    model = build_model(DROPOUT)
    optimizer = build_optimizer(AdamWConfig(lr=1e-3), model=model)
    return cpu_trainer(model, optimizer, _loader(data, shuffle=True), max_steps=STEPS)


def test_resume_with_dropout_is_bitwise_the_uninterrupted_run(tmp_path):
    data = write_ids(tmp_path / "data", 0, 96)
    cfg = CheckpointConfig(save_folder=str(tmp_path / "ckpts"), async_upload=False)
    reference = _trainer(data)
    saver = Checkpointer(
        cfg, run_name="r", run_dir=str(tmp_path / "run"), every_steps=AT, model_config=asdict(DROPOUT)
    )
    reference.callbacks.append(CheckpointCallback(saver, fmt="full"))
    reference.fit()

    resumed = _trainer(data)  # a new "process": same seed, same construction
    load = CheckpointConfig(load_path=str(tmp_path / "ckpts" / f"ep0-ba{AT}"))
    start = resolve_start(load, run_name="r", scratch=str(tmp_path / "scratch"))
    assert start is not None and not start.weights_only and start.info.manifest.step == AT
    load_into(resumed, start, cfg=load, cache_root=str(tmp_path / "cache"))
    resumed.fit()

    assert resumed.state.step == STEPS
    assert resumed.last_train["train/loss"] == reference.last_train["train/loss"]
    assert_bitwise_equal(resumed.model.state_dict(), reference.model.state_dict(), "model")
    assert_bitwise_equal(resumed.optimizer.state_dict(), reference.optimizer.state_dict(), "optimizer")
