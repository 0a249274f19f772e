"""The training loop: microbatched steps with token-weighted accumulation, clipping, eval, callbacks.

Design note: one class owns the step (the only function allowed to be long) and *all* mutable run state:
counters in `TrainState`, plus the model, optimizer, scheduler, scaler and dataloader, so `state_dict()`
collects everything a checkpoint needs in one place. Microbatch losses are weighted by their share of the
device batch's loss-generating tokens, so any microbatch split gives the gradient of one big batch
(4 x 2 == 1 x 8). With `auto`, an out-of-memory error zeroes the gradients, halves the microbatch and
retries the *same* batch; counters move only after a step succeeds, so nothing is lost or counted twice.
A mixture's batches may carry `stream_id` (see `foundry.train.stream_metrics`): it never reaches the model,
eval adds a loss/perplexity per stream, and training counts samples and loss tokens per stream.
The eval pass itself is `foundry.train.evaluation.eval_pass`.
Failure handling hooks the step boundary from its own modules: `foundry.train.preemption` (a signal sets
`stop_requested`, the checkpoint callback saves, exit 75) and `foundry.train.spike_guard` (rollback + skip).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from foundry.callbacks.base import Callback
from foundry.loggers.base import Logger
from foundry.parallel.dist import all_reduce_sum, world_size
from foundry.parallel.grad import clip_grad_norm_, gradient_sync, microbatch_weight
from foundry.precision import autocast, build_grad_scaler, check_precision
from foundry.rng import rng_state, set_rng_state
from foundry.train.auto_microbatch import is_oom, next_microbatch_size
from foundry.train.batching import BatchPlan, loss_tokens, split_batch
from foundry.train.compile import compile_model
from foundry.train.config import TrainerConfig
from foundry.train.evaluation import eval_pass
from foundry.train.preemption import PreemptionWatch, shield_workers
from foundry.train.spike_guard import SpikeGuard
from foundry.train.state import TrainState
from foundry.train.stream_metrics import (
    STREAM_ID,
    StreamCounter,
    check_stream_names,
    model_inputs,
    require_names,
)

__all__ = ["Trainer"]


class _Spike(Exception):
    """`train_step` found a spike (before the optimizer step); `fit` rolls back with `guard`."""

    def __init__(self, guard: SpikeGuard, reason: str) -> None:
        super().__init__(reason)
        self.guard, self.reason = guard, reason


class Trainer:
    """Runs optimizer steps until `max_steps`, evaluating every `eval_interval_steps`.

    Args:
        model: A causal LM whose `forward(input_ids, labels=..., attention_mask=...)` returns `.loss`.
        optimizer: Its optimizer.
        scheduler: LR scheduler stepped once per optimizer step (or None).
        train_loader: Yields dicts of (B, S) tensors with B = the device batch size.
        eval_loader: The eval split's loader (or None).
        cfg: The trainer config (precision, clipping, eval subset, compile, ...).
        plan: Batch sizes (the microbatch size may change with `auto`).
        max_steps: Optimizer steps to run.
        eval_interval_steps: Evaluate every this many steps (0: only at the end).
        max_seq_len: Row length (for throughput and MFU).
        device: Where to train.
        loggers: Receive the metrics.
        callbacks: Observe the run and add metrics.
        stream_names: Stream index -> name, for batches that carry `stream_id` (a data mixture): adds
            `eval/<name>/loss|perplexity` and `train/<name>/samples|tokens`. None: data without streams.
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        # an LR scheduler or None
        scheduler: Any,
        # an iterable of batches with state_dict()
        train_loader: Any,
        eval_loader: Any,
        cfg: TrainerConfig,
        plan: BatchPlan,
        max_steps: int,
        eval_interval_steps: int,
        max_seq_len: int,
        device: torch.device,
        loggers: list[Logger] | None = None,
        callbacks: list[Callback] | None = None,
        stream_names: Sequence[str] | None = None,
    ) -> None:
        check_precision(cfg.precision, device=device)
        self.model = model
        self.forward_model = compile_model(model, cfg.compile, dynamic=cfg.compile_dynamic)
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.train_loader = train_loader
        self.eval_loader = eval_loader
        self.cfg = cfg
        self.plan = plan
        self.max_steps = max_steps
        self.eval_interval_steps = eval_interval_steps
        self.max_seq_len = max_seq_len
        self.device = device
        self.loggers = loggers or []
        self.callbacks = callbacks or []
        self.scaler = build_grad_scaler(cfg.precision, device=device)
        self.state = TrainState(microbatch_size=plan.microbatch_size)
        self.last_eval: dict[str, float] = {}
        self.last_train: dict[str, float] = {}
        self._iter: Iterator[dict[str, torch.Tensor]] | None = None
        self.stream_names = check_stream_names(stream_names)
        self.streams = None if self.stream_names is None else StreamCounter(self.stream_names, device=device)
        self.guard = SpikeGuard(cfg.spike_guard) if cfg.spike_guard.enabled else None
        # a preemption stops the run at this step (the checkpoint callback saves)
        self.stop_requested = False
        # data workers must not die of the signal the rank handles
        shield_workers(train_loader, eval_loader)

    # ------------------------------------------------------------------ state
    def run_state(self) -> dict[str, Any]:
        """The non-tensor-heavy resume state: scheduler, scaler, counters (incl. the `auto` microbatch), data,
        and with `stream_names` the per-stream counts (summed over ranks here: every rank calls this)."""
        run = {
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "scaler": None if self.scaler is None else self.scaler.state_dict(),
            "state": self.state.state_dict(),
            "dataloader": getattr(self.train_loader, "state_dict", lambda: None)(),
        }
        if self.streams is not None:
            self.streams.flush()
            run["streams"] = self.streams.state_dict()
        if self.guard is not None:
            run["spike_guard"] = self.guard.state_dict()
        return run

    def load_run_state(self, run: dict[str, Any]) -> None:
        """Restores what `run_state` returned (the next step continues where that one stopped)."""
        if self.scheduler is not None and run["scheduler"] is not None:
            self.scheduler.load_state_dict(run["scheduler"])
        if self.scaler is not None and run["scaler"] is not None:
            self.scaler.load_state_dict(run["scaler"])
        self.state.load_state_dict(run["state"])
        self.plan = BatchPlan(
            self.plan.global_batch_size,
            self.plan.device_batch_size,
            self.state.microbatch_size,
            self.plan.auto_microbatch,
        )
        if run.get("dataloader") is not None:
            self.train_loader.load_state_dict(run["dataloader"])
        # checkpoints from before streams have none
        if self.streams is not None and run.get("streams"):
            self.streams.load_state_dict(run["streams"])
        if self.guard is not None and run.get("spike_guard"):
            self.guard.load_state_dict(run["spike_guard"])
        self._iter = None

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume in one process: model, optimizer, run state and RNG."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "run": self.run_state(),
            "rng": rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what `state_dict` returned."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.load_run_state(state["run"])
        set_rng_state(state["rng"])

    # ------------------------------------------------------------------ data
    def _next_batch(self) -> dict[str, torch.Tensor]:
        limit = self.cfg.train_subset_num_batches
        for _ in range(2):
            if self._iter is None:
                self._iter = iter(self.train_loader)
            if limit < 0 or self.state.step_in_epoch < limit:
                batch = next(self._iter, None)
                if batch is not None:
                    if self.guard is not None:
                        self.guard.drawn += 1
                    return batch
            self._iter = None
            self.state.epoch += 1
            self.state.step_in_epoch = 0
        raise RuntimeError(
            "the training split yields no full batch: it has fewer samples than the device batch"
        )

    # ------------------------------------------------------------------ step
    def _forward_backward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Accumulates gradients of the device batch; returns the global batch's (token-weighted) mean loss.

        Each microbatch loss is weighted by its loss tokens / the GLOBAL batch's (all ranks) x world size, as
        DDP/FSDP average gradients over ranks; gradients are reduced across ranks on the last microbatch only.
        """
        micro = split_batch(model_inputs(batch), self.state.microbatch_size)
        by_tokens = self.cfg.accumulate_train_batch_on_tokens
        count = loss_tokens(batch) if by_tokens else batch["input_ids"].shape[0]
        total = float(all_reduce_sum(torch.tensor(float(count), dtype=torch.float64, device=self.device)))
        ranks = world_size()
        loss_sum = torch.zeros((), device=self.device)
        for i, mb in enumerate(micro):
            n = loss_tokens(mb) if by_tokens else mb["input_ids"].shape[0]
            weight = microbatch_weight(n, global_count=total, world_size=ranks)
            with gradient_sync(self.model, enabled=i == len(micro) - 1):
                with autocast(self.cfg.precision, device=self.device):
                    loss = self.forward_model(**mb).loss
                scaled = loss * weight
                if self.scaler is not None:
                    scaled = self.scaler.scale(scaled)
                scaled.backward()
            loss_sum += loss.detach().float() * (weight / ranks)
        return all_reduce_sum(loss_sum)

    def _tokens_of(self, batch: dict[str, torch.Tensor]) -> int:
        """Tokens of the global batch by `trainer.token_counting`: batch x row length (`padded`), or the
        `attention_mask` ones summed over ranks (`non_pad`, Composer's count; all of `input_ids` without
        one)."""
        if self.cfg.token_counting != "non_pad":
            return self.plan.global_batch_size * batch["input_ids"].shape[1]
        mask = batch.get("attention_mask")
        mine = int(mask.sum()) if mask is not None else batch["input_ids"].numel()
        return int(all_reduce_sum(torch.tensor(float(mine), dtype=torch.float64, device=self.device)))

    def train_step(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One optimizer step on one device batch (with OOM retries under `auto`); returns its metrics."""
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        stream_id = batch.pop(STREAM_ID, None)
        if stream_id is not None:
            require_names(self.stream_names)
        self.model.train()
        while True:
            try:
                loss = self._forward_backward(batch)
                break
            except RuntimeError as err:
                if not (self.plan.auto_microbatch and is_oom(err)):
                    raise
                # ranks would disagree on the retry and deadlock
                if world_size() > 1:
                    raise RuntimeError(
                        f"out of memory with {world_size()} ranks: device_train_microbatch_size=auto cannot "
                        "retry across ranks; set trainer.device_train_microbatch_size to an int"
                    ) from err
                self.optimizer.zero_grad(set_to_none=True)
                del err
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                self.state.microbatch_size = next_microbatch_size(self.state.microbatch_size)
                if self.scaler is not None:
                    self.scaler = build_grad_scaler(self.cfg.precision, device=self.device)
        metrics: dict[str, float] = {}
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        norm: float | None = None
        if self.cfg.grad_clip_norm is not None or self.guard is not None:
            # max_norm=inf: the norm only (the guard needs it), the gradients are multiplied by exactly 1
            max_norm = math.inf if self.cfg.grad_clip_norm is None else self.cfg.grad_clip_norm
            norm = float(clip_grad_norm_(list(self.model.parameters()), max_norm))
            metrics["train/grad_norm"] = norm
        if self.guard is not None:
            # with a GradScaler an inf gradient is its own business (it skips the step, lowers the scale)
            reason = self.guard.check(float(loss), None if self.scaler is not None else norm)
            if reason is not None:
                raise _Spike(self.guard, reason)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()
        s = self.state
        s.step += 1
        s.step_in_epoch += 1
        s.samples += self.plan.global_batch_size
        s.tokens += self._tokens_of(batch)
        if stream_id is not None and self.streams is not None:
            self.streams.add(stream_id, batch["labels"])
        metrics["train/loss"] = float(loss)
        metrics["trainer/device_train_microbatch_size"] = float(s.microbatch_size)
        return metrics

    # ------------------------------------------------------------------ eval
    def evaluate(self) -> dict[str, float]:
        """Token-weighted loss and perplexity over the eval split (or its first `eval_subset_num_batches` per
        rank), summed over all ranks; with `stream_id` in the batches also per stream (`eval/<name>/loss`)."""
        if self.eval_loader is None:
            return {}
        return eval_pass(
            self.model,
            self.eval_loader,
            forward=self.forward_model,
            precision=self.cfg.precision,
            device=self.device,
            subset_num_batches=self.cfg.eval_subset_num_batches,
            stream_names=self.stream_names,
        )

    def _run_eval(self) -> None:
        start = time.perf_counter()
        metrics = self.evaluate()
        seconds = time.perf_counter() - start
        for cb in self.callbacks:
            metrics.update(cb.on_eval_end(self, eval_seconds=seconds))
        if metrics:
            self.last_eval = metrics
            self._log(metrics)

    def _log(self, metrics: dict[str, float], *, step: int | None = None) -> None:
        for logger in self.loggers:
            logger.log_metrics(metrics, step=self.state.step if step is None else step)

    # ------------------------------------------------------------------ fit
    def fit(self) -> dict[str, float]:
        """Trains to `max_steps`; returns the final train metrics merged with the final eval metrics.

        Raises:
            Preempted: after a SIGTERM/SIGUSR1 (to any rank) and the checkpoint at the next step boundary.
            SpikeGuardError: `trainer.spike_guard` gave up on a step that keeps spiking.
        """
        for cb in self.callbacks:
            cb.on_fit_start(self)
        if self.cfg.eval_first and self.state.step == 0:
            self._run_eval()
        if self.guard is not None:
            self.guard.take_snapshot(self)
        with PreemptionWatch(self.cfg.preemption_grace, device=self.device) as preemption:
            while self.state.step < self.max_steps:
                start = time.perf_counter()
                try:
                    metrics = self.train_step(self._next_batch())
                except _Spike as spike:
                    # only raised with a guard; the event is logged at the last step logged so far
                    at = self.state.step
                    self._log(spike.guard.rollback(self, spike.reason), step=at)
                    continue
                seconds = time.perf_counter() - start
                if self.guard is not None:
                    self.guard.accept(self, metrics["train/loss"])
                self.stop_requested = preemption.should_stop()
                self._end_step(metrics, seconds)
                if self.stop_requested:
                    raise preemption.stop(self.state.step)
        self._run_eval()
        for cb in self.callbacks:
            cb.on_fit_end(self)
        return {**self.last_train, **self._stream_counts(), **self.last_eval}

    def _end_step(self, metrics: dict[str, float], seconds: float) -> None:
        """Callbacks (the checkpoint callback saves here, also when `stop_requested`), logging, eval."""
        for cb in self.callbacks:
            metrics.update(cb.on_step_end(self, step_seconds=seconds))
        self.last_train = metrics
        step = self.state.step
        if step % self.cfg.log_interval == 0 or step == self.max_steps or self.stop_requested:
            metrics.update(self._stream_counts())
            self._log(metrics)
        every = self.eval_interval_steps
        if every > 0 and step % every == 0 and step < self.max_steps and not self.stop_requested:
            self._run_eval()

    def _stream_counts(self) -> dict[str, float]:
        """The per-stream train counts so far, summed over ranks (a collective when batches were added)."""
        if self.streams is None:
            return {}
        self.streams.flush()
        return self.streams.metrics()
