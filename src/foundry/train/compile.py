"""`trainer.compile`: no compile, the whole model (`torch.compile(model)`), or each transformer block.

Design note: `blocks` compiles the *forward method* of every transformer block (found as FSDP and activation
checkpointing find them, `foundry.parallel.wrap.transformer_blocks`), torchtitan-style: the blocks share
one code object, and with dynamo's inlining of built-in `nn.Module`s (on by default) their parameters are
graph inputs, so the first block's graph serves every layer (a test counts the graphs). Compiling the
forward, not the module, keeps every hook outside the graph: FSDP2's all-gather/reshard and the composable
activation checkpoint run eagerly around each compiled block, and parameter names (so checkpoints) do not
change. It may run before or after `wrap_model`.

Shapes: `dynamic=None` (the default, `trainer.compile_dynamic: null`) is PyTorch's automatic dynamic shapes:
the first graph is specialised on the microbatch shape (pretraining's fixed-length rows never change it), and
when a dimension changes (`auto` micro-batching halving the microbatch after an OOM, finetuning batches padded
to their longest row) the one recompilation that follows makes it dynamic, so there is no storm of
recompilations (a test counts the graphs). `dynamic=False` compiles one static graph per shape (bounded by
dynamo's recompile limit of 8, after which it runs eagerly); `True` is dynamic from the start. Calls without
gradients (eval, ICL scoring) and with a KV cache (generation) run the block eagerly: their shapes vary batch
to batch, and they are a small share of a training run's time.

The loss: `blocks` also compiles the model's loss math (`compile_loss`, as torchtitan compiles its loss next
to its blocks), when the model offers it (MPT's `compile_loss`): the plain loss's float32 cross-entropy over
the logits, or the chunked loss's per-chunk log-sum-exp and gradient, become fused kernels instead of several
eager passes over (tokens x vocab) float32 values. The chunked loss's last, shorter chunk makes its one
recompilation (2 graphs; automatic dynamic shapes as above).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["COMPILE_MODES", "compile_blocks", "compile_loss", "compile_model", "normalize_compile"]

COMPILE_MODES = ("none", "model", "blocks")
_CACHE_KWARGS = ("cache", "past_key_values", "past_key_value", "layer_past")


def normalize_compile(value: Any) -> str:
    """`trainer.compile` as one of `COMPILE_MODES`: false/None -> none, true -> model (as before)."""
    if value is None or value is False:
        return "none"
    if value is True:
        return "model"
    if isinstance(value, str) and value.lower() in COMPILE_MODES + ("false", "true"):
        return {"false": "none", "true": "model"}.get(value.lower(), value.lower())
    raise ValueError(
        f"trainer.compile={value!r}: use false, true (the whole model) or blocks (each transformer block)"
    )


def _block_forward(eager: Callable[..., Any], compiled: Callable[..., Any]) -> Callable[..., Any]:
    def forward(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled() or any(kwargs.get(k) is not None for k in _CACHE_KWARGS):
            return eager(*args, **kwargs)
        return compiled(*args, **kwargs)

    forward.__wrapped__ = eager  # type: ignore[attr-defined]
    return forward


def compile_blocks(model: nn.Module, *, dynamic: bool | None = None, backend: Any = "inductor") -> int:
    """Compiles each transformer block's forward in place (training calls); returns the number of blocks.
    `backend`: torch.compile's (tests count graphs with a counting backend)."""
    from foundry.parallel.wrap import transformer_blocks

    blocks = transformer_blocks(model)
    for block in blocks:
        if hasattr(block.forward, "__wrapped__"):
            # already compiled
            continue
        eager = block.forward
        block.forward = _block_forward(eager, torch.compile(eager, dynamic=dynamic, backend=backend))
    return len(blocks)


def compile_loss(model: nn.Module, *, dynamic: bool | None = None, backend: Any = "inductor") -> bool:
    """Compiles the loss math of the first module in `model` (wrapped or not) that offers `compile_loss`;
    False when none does (a transformers model's own loss stays as it is)."""
    for module in model.modules():
        hook = getattr(module, "compile_loss", None)
        if callable(hook):
            hook(lambda fn: torch.compile(fn, dynamic=dynamic, backend=backend))
            return True
    return False


def compile_model(model: nn.Module, mode: str, *, dynamic: bool | None = None) -> nn.Module:
    """The module to call for forward passes: `model` itself (`none`; `blocks`: its blocks and loss math
    compiled in place) or `torch.compile(model)` (`model`)."""
    mode = normalize_compile(mode)
    if mode == "model":
        return torch.compile(model, dynamic=dynamic)  # type: ignore[return-value]
    if mode == "blocks":
        compile_blocks(model, dynamic=dynamic)
        compile_loss(model, dynamic=dynamic)
    return model
