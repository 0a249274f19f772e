"""The next-token loss: plain (full logits), chunked (fused unembedding + cross-entropy) or liger-kernel's.

Design note: `shifted_cross_entropy` is the reference: (B, S, V) logits, then a float32 cross-entropy. Its
cost at a 50k vocabulary is the logits themselves: a (tokens x vocab) tensor in the compute dtype, its float32
copy, and their gradients, several times the size of every other activation of a small model.
`chunked_linear_cross_entropy` never builds it. It walks the rows in chunks of about the hidden states' size;
for each chunk it computes the logits (in the compute dtype, as `F.linear` under autocast would), the float32
log-sum-exp and loss, and, when a gradient is wanted, the chunk's gradient at once (softmax minus one-hot,
times the upstream scale) and its contributions to the hidden states' and the weight's gradients; then the
chunk's logits are dropped. Backward only scales the stored gradients by the upstream gradient (exact: the
loss is linear in it), so the unembedding matmul runs 3 times per chunk instead of 4 with recomputation,
and peak memory is one chunk of logits plus the two gradients. `logit_scale` is applied to the hidden states
first (the same product); final logit softcapping enters through its derivative `1 - tanh^2`.
Compiled (`trainer.compile=blocks` routes the model's loss math through `torch.compile`, as torchtitan
compiles its loss): each chunk's log-sum-exp and gradient come from `chunk_loss_and_grad`, written out of
place so inductor fuses them into a reduction and one pass over the chunk's logits, instead of the eager
steps' several passes over a float32 copy (which the eager path keeps in place to hold fewer temporaries).
`liger_linear_cross_entropy` calls liger-kernel's Triton kernel (CUDA only; `loss_fn=liger_crossentropy`). The
mean is over counted targets (-100 ignored), as the plain loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "IGNORE_INDEX",
    "LOSS_FNS",
    "chunk_loss_and_grad",
    "chunked_linear_cross_entropy",
    "liger_linear_cross_entropy",
    "shifted_cross_entropy",
    "shifted_targets",
]

IGNORE_INDEX = -100
LOSS_FNS = ("torch_crossentropy", "chunked_crossentropy", "liger_crossentropy")
"""`model.loss_fn` values: full logits + CE, our chunked fused loss, liger-kernel's fused loss (CUDA)."""


def shifted_targets(labels: torch.Tensor) -> torch.Tensor:
    """(B, S) labels -> (B, S) targets: position t predicts label t+1; the last position predicts nothing."""
    return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)


def shifted_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token CE: logits (B, S, V) at t against labels (B, S) at t+1; -100 ignored
    (0 if none count)."""
    targets = shifted_targets(labels)
    losses = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        targets.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )
    return losses / (targets != IGNORE_INDEX).sum().clamp(min=1)


def chunk_rows(n_rows: int, *, vocab: int, hidden: int) -> int:
    """Rows per chunk: a chunk's logits about the size of the hidden states, in multiples of 64 rows (matmul
    tiles), at least 256 rows (when there are as many)."""
    chunks = max(1, math.ceil(vocab / hidden))
    rows = 64 * math.ceil(math.ceil(n_rows / chunks) / 64)
    return max(1, min(n_rows, max(256, rows)))


def _chunk_stats(
    logits: torch.Tensor, targets: torch.Tensor, softcap: float | None
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A chunk's float32 (softcapped) logits, their tanh (softcapping; else None), safe targets (-100 -> 0),
    per-row log-sum-exp, and the chunk's summed loss (-100 rows count 0)."""
    x = logits.float()
    capped = None
    if softcap is not None:
        capped = torch.tanh(x / softcap)
        x = softcap * capped
    valid = targets != IGNORE_INDEX
    safe_t = torch.where(valid, targets, 0)
    lse = torch.logsumexp(x, dim=-1)
    loss = torch.where(valid, lse - x.gather(1, safe_t[:, None]).squeeze(1), 0.0).sum()
    return x, capped, safe_t, lse, loss


def chunk_loss_and_grad(
    logits: torch.Tensor, targets: torch.Tensor, row_weight: torch.Tensor, softcap: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk: the summed CE of `softcap(logits)` against `targets` (float32; -100 rows count 0) and its
    gradient with respect to `logits` with row `i` scaled by `row_weight[i]` (in `logits`' dtype). Out of
    place, for `torch.compile` to fuse."""
    x, capped, safe_t, lse, loss = _chunk_stats(logits, targets, softcap)
    onehot = torch.arange(x.shape[-1], device=x.device)[None, :] == safe_t[:, None]
    g = (torch.exp(x - lse[:, None]) - onehot.to(x.dtype)) * row_weight[:, None]
    if capped is not None:
        g = g * (1.0 - capped * capped)
    return loss, g.to(logits.dtype)


def _chunk_loss_and_grad_in_place(
    logits: torch.Tensor, targets: torch.Tensor, row_weight: torch.Tensor, softcap: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`chunk_loss_and_grad` without a compiler: softmax minus one-hot built in place in the chunk's float32
    logits (`logits` is a fresh product the caller drops), so no more (rows x vocab) copies are made."""
    x, capped, safe_t, lse, loss = _chunk_stats(logits, targets, softcap)
    g = x.sub_(lse[:, None]).exp_()
    g.scatter_add_(1, safe_t[:, None], torch.full_like(lse[:, None], -1.0))
    g.mul_(row_weight[:, None])
    if capped is not None:
        g.mul_(capped.mul_(capped).neg_().add_(1.0))
    return loss, g.to(logits.dtype)


ChunkFn = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, float | None], tuple[torch.Tensor, torch.Tensor]
]


class _ChunkedLinearCE(torch.autograd.Function):
    """sum over rows of CE(softcap(h @ W.T), target) / count;
    gradients computed in forward (see module note)."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        softcap: float | None,
        chunk: int,
        want_grad: bool,
        chunk_fn: ChunkFn | None,
    ) -> torch.Tensor:
        count = (targets != IGNORE_INDEX).sum().clamp(min=1).to(torch.float32)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if want_grad else None
        grad_weight = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_grad else None
        )
        chunk_grad = chunk_fn or _chunk_loss_and_grad_in_place
        for start in range(0, hidden.shape[0], chunk):
            h = hidden[start : start + chunk]
            t = targets[start : start + chunk]
            if grad_hidden is None or grad_weight is None:
                total = total + _chunk_stats(h @ weight.t(), t, softcap)[-1]
                continue
            part, g = chunk_grad(h @ weight.t(), t, (t != IGNORE_INDEX).to(torch.float32) / count, softcap)
            total = total + part
            grad_hidden[start : start + chunk] = g @ weight
            grad_weight.add_(g.t() @ h)
        ctx.weight_dtype = weight.dtype
        ctx.save_for_backward(grad_hidden, grad_weight)
        return total / count

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        if grad_hidden is None:
            raise RuntimeError("chunked cross-entropy: backward through a loss computed without gradients")
        gh = grad_hidden * grad_out.to(grad_hidden.dtype) if ctx.needs_input_grad[0] else None
        gw = (grad_weight * grad_out).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None
        return gh, gw, None, None, None, None, None


def _flat_inputs(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *, logit_scale: float | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, d) hidden states and the weight in the compute dtype (autocast's, as `F.linear` would use), and
    the flat shifted targets; `logit_scale` folded into the hidden states."""
    dtype = hidden.dtype
    kind = hidden.device.type
    if kind in ("cuda", "cpu") and torch.is_autocast_enabled(kind):
        dtype = torch.get_autocast_dtype(kind)
    h = hidden.reshape(-1, hidden.shape[-1])
    if logit_scale is not None:
        h = h * logit_scale
    return h.to(dtype), weight.to(dtype), shifted_targets(labels).reshape(-1)


def chunked_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    logit_scale: float | None = None,
    softcap: float | None = None,
    chunk_size: int | None = None,
    chunk_fn: ChunkFn | None = None,
) -> torch.Tensor:
    """`shifted_cross_entropy(logits(hidden), labels)` without the full logits tensor.

    Args:
        hidden: (B, S, d) final hidden states.
        weight: (V, d) unembedding weight.
        labels: (B, S) labels (shifted inside; -100 ignored).
        logit_scale: multiply the logits by this (MPT's `logit_scale`).
        softcap: final logit softcapping `cap * tanh(logits / cap)`.
        chunk_size: rows per chunk (default: a chunk of logits about the size of `hidden`).
        chunk_fn: `chunk_loss_and_grad` compiled (used when gradients are wanted); None: the eager steps.

    Returns:
        The mean loss over counted targets (float32 scalar).
    """
    h, w, targets = _flat_inputs(hidden, weight, labels, logit_scale=logit_scale)
    chunk = chunk_size or chunk_rows(h.shape[0], vocab=w.shape[0], hidden=w.shape[1])
    want_grad = torch.is_grad_enabled() and (h.requires_grad or w.requires_grad)
    return _ChunkedLinearCE.apply(h, w, targets, softcap, chunk, want_grad, chunk_fn)


def liger_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    logit_scale: float | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """The same loss through liger-kernel's fused linear cross-entropy (Triton; CUDA only).

    Raises:
        ValueError: not on CUDA, or liger-kernel is not installed (naming the alternative).
    """
    if hidden.device.type != "cuda":
        raise ValueError(
            f"model.loss_fn=liger_crossentropy needs CUDA (device is {hidden.device}); "
            "use loss_fn=chunked_crossentropy (same loss, any device)"
        )
    try:
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
    except ImportError:
        raise ValueError(
            "model.loss_fn=liger_crossentropy needs liger-kernel (pip install liger-kernel); "
            "or use loss_fn=chunked_crossentropy"
        ) from None
    h, w, targets = _flat_inputs(hidden, weight, labels, logit_scale=logit_scale)
    loss_fn = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX, reduction="mean", softcap=softcap)
    return loss_fn(w, h, targets).float()
