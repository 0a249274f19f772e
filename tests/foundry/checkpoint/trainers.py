"""In-process CPU Trainers for the checkpoint tests: a tiny MPT, random token batches, a global batch of 8."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from foundry.models import MPTModelConfig
from foundry.train.batching import BatchPlan
from foundry.train.config import TrainerConfig
from foundry.train.loop import Trainer

MODEL = MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64)
"""The tiny MPT (16 tokens a row, 64 ids)."""


def random_batches(n: int, seed: int = 1) -> list[dict[str, torch.Tensor]]:
    """`n` batches of 8 rows of 16 random ids, their labels the ids."""
    g = torch.Generator().manual_seed(seed)
    return [
        {"input_ids": (ids := torch.randint(0, 64, (8, 16), generator=g)), "labels": ids.clone()}
        for _ in range(n)
    ]


def cpu_trainer(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: Iterable[dict[str, torch.Tensor]],
    *,
    max_steps: int,
    microbatch: int = 4,
) -> Trainer:
    """A one-process fp32 CPU Trainer: global batches of 8 in microbatches of `microbatch`, no scheduler, no
    eval, no progress bar."""
    cfg = TrainerConfig(
        global_train_batch_size=8,
        device_train_microbatch_size=microbatch,
        device="cpu",
        precision="fp32",
        progress_bar=False,
    )
    return Trainer(
        model=model,
        optimizer=optimizer,
        scheduler=None,
        train_loader=loader,
        eval_loader=None,
        cfg=cfg,
        plan=BatchPlan(8, 8, microbatch, False),
        max_steps=max_steps,
        eval_interval_steps=0,
        max_seq_len=16,
        device=torch.device("cpu"),
    )
