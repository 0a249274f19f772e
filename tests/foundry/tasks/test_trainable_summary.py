"""`foundry.tasks.pretrain.trainable_summary`: the line a LoRA run prints (trainable vs total parameters)."""

from __future__ import annotations

from dataclasses import replace

from foundry.models import MPTModelConfig, build_model
from foundry.models.peft.schema import PeftConfig
from foundry.tasks.pretrain import trainable_summary

TINY = MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64)


def test_a_lora_model_reports_its_trainable_share():
    model = build_model(replace(TINY, peft_config=PeftConfig(r=2, lora_alpha=4)))
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    line = trainable_summary(model)
    assert line == f"trainable params: {trainable:,} of {total:,} ({100 * trainable / total:.2f}%)"
    assert "," in line  # thousands separators


def test_a_fully_trained_model_prints_nothing():
    assert trainable_summary(build_model(TINY)) is None
