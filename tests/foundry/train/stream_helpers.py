"""A tiny model, hand-made mixture batches carrying `stream_id`, and a CPU trainer for the per-stream tests."""

from __future__ import annotations

from typing import Any

import torch

from foundry.models import MPTModelConfig, build_model
from foundry.train.batching import plan_batches
from foundry.train.config import TrainerConfig
from foundry.train.loop import Trainer

NAMES = ("c4", "arxiv", "code")


def tiny_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64))


def mixture_batches(
    n: int, *, bs: int = 8, seq: int = 16, seed: int = 1, streams: int = 2
) -> list[dict[str, torch.Tensor]]:
    """Batches whose rows come from streams 0..streams-1 (uneven loss tokens per row and per stream)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, 64, (bs, seq), generator=g)
        labels = ids.clone()
        labels[:, -3:] = -100
        labels[0, :8] = -100
        stream_id = torch.randint(0, streams, (bs,), generator=g)
        out.append({"input_ids": ids, "labels": labels, "stream_id": stream_id})
    return out


def without_streams(batches: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
    return [{k: v for k, v in b.items() if k != "stream_id"} for b in batches]


def rows_of(batches: list[dict[str, torch.Tensor]], stream: int) -> list[dict[str, torch.Tensor]]:
    """One batch holding every row of `stream` (no `stream_id`): the stream evaluated alone."""
    rows = [{k: v[b["stream_id"] == stream] for k, v in b.items() if k != "stream_id"} for b in batches]
    return [{k: torch.cat([r[k] for r in rows]) for k in ("input_ids", "labels")}]


class ListLogger:
    """Collects (step, metrics) pairs."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_hyperparameters(self, params: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], *, step: int) -> None:
        self.rows.append((step, dict(metrics)))

    def close(self) -> None:
        pass


def make_trainer(
    model: torch.nn.Module,
    *,
    loader: Any,
    microbatch: int | str = 8,
    max_steps: int = 1,
    eval_loader: Any = None,
    stream_names: tuple[str, ...] | None = NAMES,
    loggers: list[Any] | None = None,
    adam: bool = False,
    **cfg_kw: Any,
) -> Trainer:
    cfg = TrainerConfig(
        global_train_batch_size=8,
        device_train_microbatch_size=microbatch,
        device="cpu",
        progress_bar=False,
        precision="fp32",
        grad_clip_norm=None,
        **cfg_kw,
    )
    return Trainer(
        model=model,
        optimizer=(torch.optim.AdamW if adam else torch.optim.SGD)(model.parameters(), lr=0.1),
        scheduler=None,
        train_loader=loader,
        eval_loader=eval_loader,
        cfg=cfg,
        plan=plan_batches(global_batch_size=8, world_size=1, microbatch=microbatch),
        max_steps=max_steps,
        eval_interval_steps=0,
        max_seq_len=16,
        device=torch.device("cpu"),
        loggers=loggers,
        stream_names=stream_names,
    )
