"""The eval pass: token-weighted loss and perplexity over the eval split, and per stream for a mixture.

Design note: one pass accumulates every number into a single float64 tensor on the device, `[loss x tokens,
tokens]` and, when batches carry `stream_id`, `[loss sums (K), tokens (K), rows matched, rows]`, then reduces
it over ranks with one all-reduce, so each rank evaluates its own share of the split and nothing synchronises
with the device per batch. Per-stream sums come from the logits the model returns
(`foundry.train.stream_metrics`). `foundry.train.loop.Trainer.evaluate` calls `eval_pass` with its model and
its own config values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from foundry.parallel.dist import all_reduce_sum
from foundry.precision import autocast
from foundry.train.batching import loss_tokens
from foundry.train.stream_metrics import (
    STREAM_ID,
    check_rows,
    model_inputs,
    require_names,
    row_losses,
    stream_eval_metrics,
    stream_matrix,
)

__all__ = ["eval_pass"]


@torch.no_grad()
def eval_pass(
    model: nn.Module,
    loader: Iterable[dict[str, torch.Tensor]],
    *,
    forward: Callable[..., Any],
    precision: str,
    device: torch.device,
    subset_num_batches: int,
    stream_names: tuple[str, ...] | None,
) -> dict[str, float]:
    """Token-weighted loss and perplexity over `loader` (or its first `subset_num_batches` when >= 0), summed
    over all ranks; with `stream_id` in the batches also per stream (`eval/<name>/loss|perplexity`).

    Args:
        model: The model (put in eval mode for the pass, back in train mode after it).
        loader: This rank's share of the eval split.
        forward: What to call on a batch: `model` or its compiled version.
        precision: The autocast precision (`trainer.precision`).
        device: Where the batches go.
        subset_num_batches: Batches per rank to evaluate (< 0: all).
        stream_names: Stream index -> name (None: data without streams).

    Returns:
        `eval/loss` and `eval/perplexity` (+ per stream); empty when the split had no loss tokens.
    """
    model.eval()
    k = 0 if stream_names is None else len(stream_names)
    totals = torch.zeros(2 + (2 * k + 2 if k else 0), dtype=torch.float64, device=device)
    for i, batch in enumerate(loader):
        if 0 <= subset_num_batches <= i:
            break
        on_device = {key: v.to(device) for key, v in batch.items()}
        _add_batch(model, forward, on_device, totals, precision=precision, device=device, names=stream_names)
    model.train()
    # over every rank's share of the eval split
    values = all_reduce_sum(totals).tolist()
    loss_sum, count = values[:2]
    if count == 0:
        return {}
    mean = loss_sum / count
    metrics = {"eval/loss": mean, "eval/perplexity": math.exp(min(mean, 700.0))}
    if stream_names is not None:
        check_rows(values[-2], values[-1], stream_names)
        sums, tokens = values[2 : 2 + k], values[2 + k : 2 + 2 * k]
        metrics.update(stream_eval_metrics(stream_names, sums, tokens))
    return metrics


def _add_batch(
    model: nn.Module,
    forward: Callable[..., Any],
    batch: dict[str, torch.Tensor],
    totals: torch.Tensor,
    *,
    precision: str,
    device: torch.device,
    names: tuple[str, ...] | None,
) -> None:
    """Adds one batch to `totals` (see `eval_pass`); per-stream sums come from the returned logits."""
    stream_id = batch.get(STREAM_ID)
    n = loss_tokens(batch)
    with autocast(precision, device=device):
        out = forward(**model_inputs(batch))
    totals[0] += out.loss.double() * n
    totals[1] += n
    if stream_id is None:
        return
    k = len(require_names(names))
    if getattr(out, "logits", None) is None:
        raise ValueError(
            f"{type(model).__name__} returned no logits: per-stream eval losses are computed from them"
        )
    sums, tokens = row_losses(out.logits, batch["labels"])
    member = stream_matrix(stream_id, k).double()
    totals[2 : 2 + k] += member.T @ sums
    totals[2 + k : 2 + 2 * k] += member.T @ tokens.double()
    totals[-2] += member.sum()
    totals[-1] += stream_id.shape[0]
