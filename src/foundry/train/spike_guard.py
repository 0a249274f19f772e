"""The spike guard: a NaN/Inf or outlier loss rolls the run back to a recent good state and skips its batches.

Design note: detection runs after backward and *before* the optimizer step, on values every rank already
shares (the all-reduced global loss and the global gradient norm), so all ranks decide alike with no extra
collective and the offending gradients never reach the weights. A spike is a non-finite loss or gradient
norm, or a loss more than `z_threshold` robust z-scores above the median of the last `window` good losses
(z = (loss - median) / (1.4826 x MAD), the MAD floored at 1e-3 x |median| so a flat history does not turn
float noise into spikes; only upward outliers count).

Rollback target: an in-memory CPU snapshot (model and optimizer `state_dict()`s, scheduler, scaler,
counters, RNG, the loss window) taken at fit start and every
`snapshot_interval` good steps; not the last checkpoint on disk, because checkpoints are usually hundreds of
steps apart and reloading them is slow. The data position is *not* rolled back: as in PaLM's recipe, the
batches drawn since the snapshot (the spiking one included) are skipped and the run goes on with the next
batch, so the skip is deterministic for any loader and a checkpoint after it resumes exactly. With
`snapshot_interval: 1` exactly the offending batch is skipped (the run then equals one whose data lacks that
batch); larger intervals cost less copying and discard the good batches since the snapshot too.
A step that keeps spiking after `retries_per_step` rollbacks, or more than `max_rollbacks` rollbacks in
one run, stops the run with `SpikeGuardError` naming the steps, batches and reasons.
The plain `state_dict()`s are used, not `get_state_dict` as in checkpoints: that one initializes an
optimizer without state by a fake step, which moves Adam's step count and so the whole run (tested with
DDP and FSDP2 on 2 CPU ranks; not yet on GPUs, where the CPU copy of a DTensor is untested).
Limits: a resume takes a fresh snapshot at its first step (a later rollback may then skip fewer batches than
the uninterrupted run); the steps between the snapshot and the spike are logged twice.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from foundry.checkpoint.state import snapshot
from foundry.precision import build_grad_scaler
from foundry.rng import rng_state, set_rng_state
from foundry.train.config import SpikeGuardConfig

if TYPE_CHECKING:
    from foundry.train.loop import Trainer

__all__ = ["SpikeGuard", "SpikeGuardConfig", "SpikeGuardError", "robust_z", "spike_reason"]

_MAD_TO_SIGMA = 1.4826
# the floor of the robust scale, as a multiple of |median|
_MIN_SCALE = 1e-3


class SpikeGuardError(RuntimeError):
    """The run spiked again where a rollback did not help (or too often): training stops."""


def robust_z(history: Sequence[float], value: float) -> float:
    """How many robust standard deviations `value` lies above the median of `history` (non-empty)."""
    median = statistics.median(history)
    mad = statistics.median(abs(x - median) for x in history)
    scale = max(_MAD_TO_SIGMA * mad, _MIN_SCALE * abs(median), 1e-12)
    return (value - median) / scale


def spike_reason(
    loss: float, grad_norm: float | None, history: Sequence[float], cfg: SpikeGuardConfig
) -> str | None:
    """Why this step is a spike, or None when it is fine (a pure function of what every rank saw)."""
    if not math.isfinite(loss):
        return f"loss is {loss}"
    if grad_norm is not None and not math.isfinite(grad_norm):
        return f"gradient norm is {grad_norm}"
    if len(history) >= cfg.min_history:
        z = robust_z(history, loss)
        if z > cfg.z_threshold:
            return (
                f"loss {loss:.4g} is {z:.1f} robust z-scores above the median "
                f"{statistics.median(history):.4g} of the last {len(history)} steps "
                f"(threshold {cfg.z_threshold:g})"
            )
    return None


@dataclass
class _Snapshot:
    step: int
    drawn: int
    model: dict[str, Any]
    optimizer: dict[str, Any] | None
    run: dict[str, Any]
    rng: dict[str, Any]
    history: list[float]


@dataclass
class SpikeGuard:
    """The guard's state: the loss window, the data position in batches, what was skipped, the snapshot."""

    cfg: SpikeGuardConfig
    history: deque[float] = field(init=False)
    drawn: int = 0
    """Device batches drawn from the train loader so far (the next batch's global index)."""
    skipped: list[int] = field(default_factory=list)
    rollbacks: int = 0
    spikes_at: dict[int, int] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    snap: _Snapshot | None = None

    def __post_init__(self) -> None:
        self.history = deque(maxlen=self.cfg.window)

    # ---------------------------------------------------------------- per step
    def check(self, loss: float, grad_norm: float | None) -> str | None:
        """The spike reason for this step's global loss / gradient norm, or None."""
        return spike_reason(loss, grad_norm, self.history, self.cfg)

    def accept(self, trainer: Trainer, loss: float) -> None:
        """After a good step: add its loss to the window; snapshot at the interval."""
        self.history.append(loss)
        if trainer.state.step % self.cfg.snapshot_interval == 0:
            self.take_snapshot(trainer)

    def take_snapshot(self, trainer: Trainer) -> None:
        """Copies the trainer's state (every rank its own part) to CPU memory."""
        model_sd, optim_sd = trainer.model.state_dict(), trainer.optimizer.state_dict()
        run = {
            "scheduler": None if trainer.scheduler is None else trainer.scheduler.state_dict(),
            "scaler": None if trainer.scaler is None else trainer.scaler.state_dict(),
            "state": trainer.state.state_dict(),
            "streams": None,
        }
        if trainer.streams is not None:
            trainer.streams.flush()
            run["streams"] = trainer.streams.state_dict()
        self.snap = _Snapshot(
            step=trainer.state.step,
            drawn=self.drawn,
            model=snapshot(model_sd),
            optimizer=snapshot(optim_sd),
            run=snapshot(run),
            rng=rng_state(),
            history=list(self.history),
        )

    # ---------------------------------------------------------------- rollback
    def rollback(self, trainer: Trainer, reason: str) -> dict[str, float]:
        """Restores the snapshot, skips the batches drawn since it; returns metrics describing the event.

        Raises:
            SpikeGuardError: the same step spiked more than `retries_per_step` times, or the run more than
                `max_rollbacks` times.
        """
        snap = self.snap
        if snap is None:
            raise RuntimeError("spike guard: no snapshot to roll back to (take_snapshot runs at fit start)")
        at = trainer.state.step + 1
        first, last = snap.drawn, self.drawn - 1
        self.reasons.append(f"step {at} (global batch {last}): {reason}")
        self.spikes_at[at] = self.spikes_at.get(at, 0) + 1
        if self.spikes_at[at] > self.cfg.retries_per_step or self.rollbacks >= self.cfg.max_rollbacks:
            raise SpikeGuardError(self._report(at))
        self.rollbacks += 1
        self.skipped.extend(range(first, last + 1))
        self._restore(trainer, snap)
        print(
            f"[foundry] spike guard: {reason} at step {at} (global batch {last}); rolled back to step "
            f"{snap.step} and skipped global batches {first}..{last} (rollback {self.rollbacks} of at most "
            f"{self.cfg.max_rollbacks})",
            flush=True,
        )
        return {
            "spike_guard/rollbacks": float(self.rollbacks),
            "spike_guard/spike_step": float(at),
            "spike_guard/rolled_back_to_step": float(snap.step),
            "spike_guard/skipped_first_batch": float(first),
            "spike_guard/skipped_last_batch": float(last),
            "spike_guard/skipped_batches": float(len(self.skipped)),
        }

    def _restore(self, trainer: Trainer, snap: _Snapshot) -> None:
        trainer.optimizer.zero_grad(set_to_none=True)
        # copies into the live parameters
        trainer.model.load_state_dict(snap.model)
        # may keep the tensors it is given
        trainer.optimizer.load_state_dict(snapshot(snap.optimizer))
        run = snap.run
        if trainer.scheduler is not None:
            trainer.scheduler.load_state_dict(run["scheduler"])
        # None unless amp_fp16
        fresh = build_grad_scaler(trainer.cfg.precision, device=trainer.device)
        # the spiking step left the live one "unscaled"
        if trainer.scaler is not None and fresh is not None:
            fresh.load_state_dict(run["scaler"])
            trainer.scaler = fresh
        s = trainer.state
        # the data is not rolled back
        data_position = (s.epoch, s.step_in_epoch)
        s.load_state_dict(run["state"])
        s.epoch, s.step_in_epoch = data_position
        if trainer.streams is not None and run["streams"] is not None:
            # drops the discarded steps' pending counts into totals, then overwritten
            trainer.streams.flush()
            trainer.streams.load_state_dict(run["streams"])
        set_rng_state(snap.rng)
        self.history = deque(snap.history, maxlen=self.cfg.window)
        # the next rollback skips from here
        self.snap = _Snapshot(**{**snap.__dict__, "drawn": self.drawn})

    def _report(self, at: int) -> str:
        skipped = ", ".join(map(str, self.skipped)) or "none"
        return (
            f"spike guard: step {at} spiked again after {self.spikes_at[at] - 1} rollback(s) for it "
            f"({self.rollbacks} in this run; "
            f"trainer.spike_guard.retries_per_step={self.cfg.retries_per_step}, "
            f"max_rollbacks={self.cfg.max_rollbacks}); the run stops. Spikes: {'; '.join(self.reasons)}. "
            f"Global batches skipped so far: {skipped}. Skipping data did not help here: lower the learning "
            "rate or raise warmup, check the data around these batches, or resume from an earlier checkpoint"
        )

    # ---------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (so a resume decides exactly as the uninterrupted run)."""
        return {
            "history": list(self.history),
            "drawn": self.drawn,
            "skipped": list(self.skipped),
            "rollbacks": self.rollbacks,
            "spikes_at": {str(k): v for k, v in self.spikes_at.items()},
            "reasons": list(self.reasons),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores `state_dict()` (the snapshot is retaken at fit start)."""
        self.history = deque((float(x) for x in state["history"]), maxlen=self.cfg.window)
        self.drawn = int(state["drawn"])
        self.skipped = [int(x) for x in state["skipped"]]
        self.rollbacks = int(state["rollbacks"])
        self.spikes_at = {int(k): int(v) for k, v in state["spikes_at"].items()}
        self.reasons = list(state["reasons"])
        self.snap = None
