"""Optimizers with *decoupled* weight decay that follows the LR schedule: DecoupledAdamW and DecoupledLionW.

Design note: these reproduce Composer's ``DecoupledAdamW`` and llm-foundry's ``DecoupledLionW`` update rules,
so ported recipes keep their meaning. The decay is **not** multiplied by the learning rate; it is scaled by
``lr / initial_lr`` (the schedule's multiplier), so ``weight_decay=1e-5`` shrinks weights by ``1e-5`` per step
at peak LR. Torch's ``AdamW`` multiplies by ``lr`` instead, so the same number means something very different.

Each step, for every parameter ``p`` with gradient ``g`` (``η`` = current lr, ``η0`` = ``initial_lr``):

- decay: ``p ← p · (1 − (η/η0)·wd)``
- DecoupledAdamW: ``m ← β1·m + (1−β1)·g``; ``v ← β2·v + (1−β2)·g²``;
  ``p ← p − η/(1−β1^t) · m / (√(v/(1−β2^t)) + ε)``
- DecoupledLionW: ``p ← p − η·sign(β1·m + (1−β1)·g)``; then ``m ← β2·m + (1−β2)·g``

Two code paths compute the same thing: a readable per-tensor loop and a ``torch._foreach_*`` path (one fused
kernel launch per op on GPU) grouped by device and dtype; ``foreach=None`` picks foreach on CUDA only. State
layout (``step`` as a 0-d float32 CPU tensor, ``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``) matches torch's
Adam family, so ``state_dict()`` works with torch.distributed.checkpoint like any torch optimizer.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, overload

import torch
from torch import Tensor
from torch.optim import Optimizer

__all__ = ["DecoupledAdamW", "DecoupledLionW"]


def _check_hparams(*, lr: float, betas: tuple[float, float], weight_decay: float, eps: float = 0.0) -> None:
    if lr < 0:
        raise ValueError(f"lr must be >= 0, got {lr}")
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"betas must be two numbers in [0, 1), got {list(betas)}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")


class _DecoupledBase(Optimizer):
    """Shared plumbing: ``initial_lr`` bookkeeping, the decay factor and the step/closure protocol."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        super().__init__(params, defaults)
        for group in self.param_groups:
            group["initial_lr"] = group["lr"]

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group; its ``initial_lr`` is its ``lr`` now (the schedule's reference point)."""
        super().add_param_group(param_group)
        self.param_groups[-1].setdefault("initial_lr", self.param_groups[-1]["lr"])

    @staticmethod
    def _decay_multiplier(group: dict[str, Any]) -> float:
        """``1 − (lr/initial_lr)·wd`` (``1 − wd`` when ``initial_lr`` is 0)."""
        initial_lr = group["initial_lr"]
        factor = group["lr"] / initial_lr if initial_lr else 1.0
        return 1.0 - factor * group["weight_decay"]

    def _use_foreach(self, group: dict[str, Any], params: list[Tensor]) -> bool:
        if group["foreach"] is None:
            return bool(params) and all(p.is_cuda for p in params)
        return bool(group["foreach"])

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Perform one optimization step.

        Args:
            closure: Optional function that re-evaluates the model and returns the loss.

        Returns:
            The closure's loss, or None.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                if p.grad.is_sparse:
                    raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
            if params:
                self._update_group(group, params, foreach=self._use_foreach(group, params))
        return loss

    def _update_group(self, group: dict[str, Any], params: list[Tensor], *, foreach: bool) -> None:
        raise NotImplementedError


def _grads(params: list[Tensor]) -> list[Tensor]:
    """The gradients of ``params`` (``step`` passes only parameters that have one)."""
    grads = []
    for p in params:
        assert p.grad is not None, "step() passes only parameters with a gradient"
        grads.append(p.grad)
    return grads


def _by_device_and_dtype(params: list[Tensor]) -> list[list[Tensor]]:
    buckets: dict[tuple[torch.device, torch.dtype], list[Tensor]] = defaultdict(list)
    for p in params:
        buckets[(p.device, p.dtype)].append(p)
    return list(buckets.values())


class DecoupledAdamW(_DecoupledBase):
    """Adam with weight decay decoupled from the gradient *and* from the learning rate (Composer's rule).

    Args:
        params: Parameters or param-group dicts.
        lr: Peak learning rate; also each group's ``initial_lr`` (the decay schedule's reference).
        betas: Coefficients of the running averages of the gradient and its square.
        eps: Added to the denominator for numerical stability.
        weight_decay: Fraction of each weight removed per step at peak LR (not multiplied by ``lr``).
        amsgrad: Use the running maximum of the second moment (AMSGrad).
        foreach: Use the ``torch._foreach_*`` path; None picks it when every parameter is on CUDA.
    """

    def __init__(
        self,
        params: Iterable[Any],
        *,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 1e-5,
        amsgrad: bool = False,
        foreach: bool | None = None,
    ) -> None:
        _check_hparams(lr=lr, betas=betas, weight_decay=weight_decay, eps=eps)
        if weight_decay >= 1e-3:
            warnings.warn(
                f"DecoupledAdamW weight_decay={weight_decay} is not multiplied by lr: weights shrink by a "
                f"factor {1.0 - weight_decay} every step at peak LR. Typical values are 0 to 1e-4.",
                stacklevel=2,
            )
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "foreach": foreach,
        }
        super().__init__(params, defaults)

    def _state_for(self, p: Tensor, amsgrad: bool) -> dict[str, Any]:
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def _update_group(self, group: dict[str, Any], params: list[Tensor], *, foreach: bool) -> None:
        beta1, beta2 = group["betas"]
        lr, eps, amsgrad = group["lr"], group["eps"], group["amsgrad"]
        decay = self._decay_multiplier(group)
        states = [self._state_for(p, amsgrad) for p in params]
        for state in states:
            state["step"] += 1
        if not foreach:
            for p, state in zip(params, states):
                step = state["step"].item()
                if group["weight_decay"] != 0:
                    p.mul_(decay)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.lerp_(p.grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                second = exp_avg_sq
                if amsgrad:
                    torch.maximum(state["max_exp_avg_sq"], exp_avg_sq, out=state["max_exp_avg_sq"])
                    second = state["max_exp_avg_sq"]
                denom = (second.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
                p.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step))
            return
        index = {id(p): i for i, p in enumerate(params)}
        for bucket in _by_device_and_dtype(params):
            bucket_states = [states[index[id(p)]] for p in bucket]
            grads = _grads(bucket)
            steps = [s["step"].item() for s in bucket_states]
            exp_avgs = [s["exp_avg"] for s in bucket_states]
            exp_avg_sqs = [s["exp_avg_sq"] for s in bucket_states]
            if group["weight_decay"] != 0:
                torch._foreach_mul_(bucket, decay)
            torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
            torch._foreach_mul_(exp_avg_sqs, beta2)
            torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
            second = exp_avg_sqs
            if amsgrad:
                second = [s["max_exp_avg_sq"] for s in bucket_states]
                torch._foreach_maximum_(second, exp_avg_sqs)
            denom = torch._foreach_sqrt(second)
            torch._foreach_div_(denom, [math.sqrt(1 - beta2**t) for t in steps])
            torch._foreach_add_(denom, eps)
            torch._foreach_addcdiv_(bucket, exp_avgs, denom, [-lr / (1 - beta1**t) for t in steps])


class DecoupledLionW(_DecoupledBase):
    """Lion (sign-of-momentum updates) with decoupled weight decay, as in llm-foundry's ``DecoupledLionW``.

    Args:
        params: Parameters or param-group dicts.
        lr: Peak learning rate; also each group's ``initial_lr``. Lion wants ~3-10x smaller LRs than Adam.
        betas: ``β1`` interpolates the update direction, ``β2`` the stored momentum.
        weight_decay: Fraction of each weight removed per step at peak LR (not multiplied by ``lr``).
        foreach: Use the ``torch._foreach_*`` path; None picks it when every parameter is on CUDA.
    """

    def __init__(
        self,
        params: Iterable[Any],
        *,
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        foreach: bool | None = None,
    ) -> None:
        _check_hparams(lr=lr, betas=betas, weight_decay=weight_decay)
        defaults = {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay, "foreach": foreach}
        super().__init__(params, defaults)

    def _update_group(self, group: dict[str, Any], params: list[Tensor], *, foreach: bool) -> None:
        beta1, beta2 = group["betas"]
        lr = group["lr"]
        decay = self._decay_multiplier(group)
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] += 1
        if not foreach:
            for p in params:
                exp_avg = self.state[p]["exp_avg"]
                if group["weight_decay"] != 0:
                    p.mul_(decay)
                update = exp_avg.lerp(p.grad, 1 - beta1).sign_()
                p.add_(update, alpha=-lr)
                exp_avg.lerp_(p.grad, 1 - beta2)
            return
        for bucket in _by_device_and_dtype(params):
            grads = _grads(bucket)
            exp_avgs = [self.state[p]["exp_avg"] for p in bucket]
            if group["weight_decay"] != 0:
                torch._foreach_mul_(bucket, decay)
            updates = torch._foreach_lerp(exp_avgs, grads, 1 - beta1)
            torch._foreach_sign_(updates)
            torch._foreach_add_(bucket, updates, alpha=-lr)
            torch._foreach_lerp_(exp_avgs, grads, 1 - beta2)
