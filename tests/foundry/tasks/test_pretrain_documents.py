"""Document masking wired end to end: a model that asks for sequence ids gets them from the loader and trains.

Both models raise in training when a batch lacks `sequence_id`, so three finished steps prove the wiring.
Skipped (saying so) while `build_text_dataloader` has no `documents` parameter: the loader-side wiring.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from transformers import GPT2Config

from foundry.config import register_configs, to_train_config
from foundry.tasks.pretrain import pretrain

CONF = Path(__file__).resolve().parents[3] / "conf"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("qs") / "quickstart")


def _cfg(tiny_data: str, *overrides: str):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(
            "train",
            overrides=["experiment=smoke-cpu", f"data.local={tiny_data}", "data.corpus_mb=0.15",
                       "data.vocab_size=300", "trainer.max_duration=3ba", "trainer.eval_interval=3ba",
                       *overrides],
        )  # fmt: skip
    return to_train_config(cfg)


def test_mpt_with_sequence_ids_trains_three_steps(tiny_data, tmp_path):
    cfg = _cfg(tiny_data, "model.attn_config.attn_uses_sequence_id=true")
    metrics = pretrain(cfg, run_dir=tmp_path)
    assert metrics["train/loss"] > 0 and metrics["eval/loss"] > 0


def test_hf_causal_lm_with_sequence_ids_trains_three_steps(tiny_data, tmp_path):
    gpt2 = tmp_path / "gpt2"
    GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=320, n_positions=128).save_pretrained(gpt2)
    cfg = _cfg(tiny_data, "model=hf-causal-lm", f"model.pretrained_model_name_or_path={gpt2}",
               "model.pretrained=false", "model.attn_uses_sequence_id=true", "data.max_seq_len=128")  # fmt: skip
    metrics = pretrain(cfg, run_dir=tmp_path / "run")
    assert torch.isfinite(torch.tensor(metrics["train/loss"]))
