"""Per-stream train counts through a real checkpoint (full and sharded): a resumed run continues them."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from foundry.checkpoint import CheckpointConfig, Checkpointer, load_into, resolve_start
from foundry.models import MPTModelConfig
from tests.foundry.train.stream_helpers import make_trainer, mixture_batches, tiny_model

MODEL = asdict(MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64))


@pytest.mark.parametrize("fmt", ["full", "sharded"])
def test_resumed_run_continues_the_per_stream_counts(tmp_path, fmt):
    batches = mixture_batches(4, streams=3)
    whole = make_trainer(tiny_model(), loader=batches, max_steps=4, adam=True).fit()
    first = make_trainer(tiny_model(), loader=batches, max_steps=2, adam=True)
    first.fit()
    cfg = CheckpointConfig(save_folder=str(tmp_path / "ckpts"))
    ckpt = Checkpointer(cfg, run_name="t", run_dir=str(tmp_path / "run"), every_steps=1, model_config=MODEL)
    ckpt.save(first, fmt=fmt)
    ckpt.close()
    second = make_trainer(tiny_model(seed=9), loader=batches[2:], max_steps=4, adam=True)
    start = resolve_start(cfg, run_name="t", scratch=str(tmp_path / "scratch"))
    assert start is not None
    load_into(second, start, cfg=cfg, cache_root=str(tmp_path / "cache"), model_config=MODEL)
    assert second.streams is not None and second.streams.state_dict() == first.streams.state_dict()
    final = second.fit()
    counts = [k for k in whole if k.endswith(("/samples", "/tokens"))]
    assert len(counts) == 6 and {k: final[k] for k in counts} == {k: whole[k] for k in counts}
