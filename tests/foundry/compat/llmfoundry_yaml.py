"""llm-foundry YAMLs for the translator tests: a minimal training YAML, one written to a temp folder, and
a translation's overrides composed with Hydra into the typed `TrainConfig` (inside the `conf` fixture)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose

from foundry.config import TrainConfig, to_train_config

MINIMAL = """
model: {name: mpt_causal_lm, d_model: 64, n_heads: 4, n_layers: 2, max_seq_len: 128, vocab_size: 512}
tokenizer: {name: EleutherAI/gpt-neox-20b}
train_loader: {name: text, dataset: {local: /data/c4, split: train, max_seq_len: 128}}
optimizer: {name: decoupled_adamw, lr: 1.0e-3}
scheduler: {name: cosine_with_warmup, t_warmup: 10ba}
max_duration: 20ba
global_train_batch_size: 8
"""
"""The smallest llm-foundry training YAML that translates."""


def compose_train(args: list[str]) -> TrainConfig:
    """`conf/train.yaml` with `args` (Hydra overrides), as the typed config."""
    return to_train_config(compose("train", overrides=args))


def write_yaml(tmp_path: Path, text: str) -> Path:
    """`text` as `tmp_path/run.yaml`."""
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path
