"""LR schedules as pure functions of the optimizer step, and a ``LambdaLR`` adapter over their config schemas.

Design note: every schedule is a pure ``f(step, *, t_warmup, t_max, ...) -> multiplier`` over integer steps,
testable against closed forms without an optimizer. The config schemas (``foundry.optim.config``, re-exported
here) keep llm-foundry's/Composer's field names and duration strings (``t_warmup: 100ba``, ``t_max: 1dur``,
``alpha_f``) so recipes port unchanged; :func:`build_lr_lambda` converts every duration to steps *once* (via
:func:`foundry.time.to_steps`) and binds the numbers, so the per-step call is cheap and cannot fail. Because
everything becomes steps, units may be mixed freely (Composer raises when a ``ba`` warmup meets a ``tok``
``max_duration``).

Semantics follow Composer (multiplier α at step ``t``, counting completed optimizer steps from 0, so the
first step runs at α(0), which is 0 during warmup):

- warmup: ``α = peak · t / t_warmup`` for ``t < t_warmup`` (peak = ``alpha`` / ``alpha_i`` / 1);
- ``τ = clip((t − t_warmup) / (t_max − t_warmup), 0, 1)`` (0 when ``t_max == t_warmup``);
- constant: ``alpha``; linear: ``alpha_i + (alpha_f − alpha_i)·τ``; cosine: ``α_f + (1 − α_f)·½(1 + cos πτ)``;
- inverse-sqrt (llm-foundry): ``α_fd + (1 − α_fd)/√((t − t_warmup + t_scale)/t_scale)`` until
  ``t_max − t_cooldown``, then linear to ``alpha_f_cooldown`` over ``t_cooldown``;
- warmup-stable-decay: 1 until ``t_max − t_decay``, then ``linear``/``cosine``/``1-sqrt`` down to ``alpha_f``.

``scale_schedule_ratio`` (Composer's SSR) multiplies every non-``dur`` time except the warmup, which is scaled
only with ``scale_warmup: true``; ``max_steps`` passed in is the already-scaled run length. Unlike Composer,
a scaled warmup is scaled consistently (Composer scales the warmup ramp but not the point where it ends).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from foundry.optim.config import (
    DECAY_SHAPES,
    ConstantWithWarmupConfig,
    CosineWithWarmupConfig,
    InvSqrtWithWarmupConfig,
    LinearDecayWithWarmupConfig,
    SchedulerConfig,
    WarmupStableDecayConfig,
)
from foundry.time import TimeUnit, parse_duration, to_steps

__all__ = [
    "ConstantWithWarmupConfig",
    "CosineWithWarmupConfig",
    "InvSqrtWithWarmupConfig",
    "LinearDecayWithWarmupConfig",
    "SchedulerConfig",
    "WarmupStableDecayConfig",
    "build_lr_lambda",
    "build_scheduler",
    "constant_with_warmup",
    "cosine_with_warmup",
    "inv_sqrt_with_warmup",
    "linear_decay_with_warmup",
    "warmup_stable_decay",
]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------- pure schedules
def _fraction(step: int, start: int, length: int) -> float:
    """``clip((step − start) / length, 0, 1)``; 0 when ``length`` is 0."""
    if length <= 0:
        return 0.0
    return min(1.0, max(0.0, (step - start) / length))


def constant_with_warmup(step: int, *, t_warmup: int, alpha: float = 1.0) -> float:
    """Linear warmup from 0 to ``alpha``, then ``alpha``."""
    if step < t_warmup:
        return alpha * step / t_warmup
    return alpha


def linear_decay_with_warmup(
    step: int, *, t_warmup: int, t_max: int, alpha_i: float = 1.0, alpha_f: float = 0.0
) -> float:
    """Linear warmup from 0 to ``alpha_i``, then linear from ``alpha_i`` to ``alpha_f`` at ``t_max``."""
    if step < t_warmup:
        return alpha_i * step / t_warmup
    return alpha_i + (alpha_f - alpha_i) * _fraction(step, t_warmup, t_max - t_warmup)


def cosine_with_warmup(step: int, *, t_warmup: int, t_max: int, alpha_f: float = 0.0) -> float:
    """Linear warmup from 0 to 1, then half a cosine from 1 to ``alpha_f`` at ``t_max``."""
    if step < t_warmup:
        return step / t_warmup
    tau = _fraction(step, t_warmup, t_max - t_warmup)
    return alpha_f + (1.0 - alpha_f) * 0.5 * (1.0 + math.cos(math.pi * tau))


def inv_sqrt_with_warmup(
    step: int,
    *,
    t_warmup: int,
    t_scale: int,
    t_cooldown: int,
    t_max: int,
    alpha_f_decay: float = 0.0,
    alpha_f_cooldown: float = 0.0,
) -> float:
    """Linear warmup to 1, inverse-sqrt decay toward ``alpha_f_decay``,
    linear cooldown to ``alpha_f_cooldown``.

    With ``t_cooldown == 0`` there is no cooldown and the inverse-sqrt decay continues past ``t_max``.
    """
    if step < t_warmup:
        return step / t_warmup

    def decay(t: int) -> float:
        return alpha_f_decay + (1.0 - alpha_f_decay) / math.sqrt((t - t_warmup + t_scale) / t_scale)

    cooldown_start = t_max - t_cooldown
    if t_cooldown <= 0 or step < cooldown_start:
        return decay(step)
    alpha_i = decay(cooldown_start)
    return alpha_i + (alpha_f_cooldown - alpha_i) * _fraction(step, cooldown_start, t_cooldown)


def warmup_stable_decay(
    step: int, *, t_warmup: int, t_decay: int, t_max: int, alpha_f: float = 0.0, decay_shape: str = "linear"
) -> float:
    """Linear warmup to 1, constant 1, then a ``t_decay``-step decay ending at ``alpha_f`` at ``t_max``.

    ``decay_shape``: ``linear`` (``1 − τ``), ``cosine`` (``½(1 + cos πτ)``) or ``1-sqrt`` (``1 − √τ``), each
    rescaled to end at ``alpha_f``. With ``t_decay == 0`` the multiplier drops to ``alpha_f`` at ``t_max``.
    """
    if step < t_warmup:
        return step / t_warmup
    decay_start = t_max - t_decay
    if step < decay_start:
        return 1.0
    if t_decay <= 0:
        return alpha_f
    tau = _fraction(step, decay_start, t_decay)
    if decay_shape == "linear":
        shape = 1.0 - tau
    elif decay_shape == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * tau))
    elif decay_shape == "1-sqrt":
        shape = 1.0 - math.sqrt(tau)
    else:
        raise ValueError(f"decay_shape must be one of {list(DECAY_SHAPES)}, got {decay_shape!r}")
    return alpha_f + (1.0 - alpha_f) * shape


# --------------------------------------------------------------------------------------------- adapters
def build_lr_lambda(
    cfg: SchedulerConfig,
    *,
    max_steps: int,
    steps_per_epoch: int | None = None,
    samples_per_step: int | None = None,
    tokens_per_step: int | None = None,
    scale_schedule_ratio: float = 1.0,
) -> Callable[[int], float]:
    """Resolve ``cfg``'s durations to steps and return the pure ``step -> multiplier`` function.

    Args:
        cfg: A schedule schema.
        max_steps: Total optimizer steps of the run (after any scale-schedule ratio).
        steps_per_epoch: Optimizer steps per epoch, for ``ep`` durations.
        samples_per_step: Global samples per optimizer step, for ``sp`` durations.
        tokens_per_step: Global tokens per optimizer step, for ``tok`` durations.
        scale_schedule_ratio: Composer's SSR; scales non-``dur`` times (warmup only with ``scale_warmup``).

    Returns:
        A ``functools.partial`` of the pure schedule with every time bound as an int.

    Raises:
        ValueError: If a duration cannot be converted, or the times are inconsistent (``t_max`` shorter than
            the run, a decay overlapping the warmup, ...); the message names the field. A warmup longer than
            the run is accepted with a one-line warning (the LR is still ramping up at the end, as in
            Composer).
    """

    def steps(field_name: str, *, scaled: bool = True) -> int:
        text = getattr(cfg, field_name)
        try:
            d = parse_duration(text)
            n = to_steps(
                d,
                max_steps=max_steps,
                steps_per_epoch=steps_per_epoch,
                samples_per_step=samples_per_step,
                tokens_per_step=tokens_per_step,
            )
        except ValueError as e:
            raise ValueError(f"scheduler.{field_name}: {e}") from None
        if scaled and d.unit is not TimeUnit.DURATION:
            n = int(n * scale_schedule_ratio)
        return n

    t_warmup = steps("t_warmup", scaled=cfg.scale_warmup)
    t_max = steps("t_max")
    if t_max < max_steps:
        raise ValueError(
            f"scheduler.t_max={cfg.t_max!r} is {t_max} steps, shorter than the run ({max_steps} steps); "
            "the LR would be stuck at its final value. Use t_max: 1dur or a longer duration"
        )
    # A warmup as long as the run (or longer: Composer accepts it too) leaves the decay outside the run, so
    # the checks on the decay below do not apply; a longer one ends the run with the LR still ramping up.
    whole_run_warmup = t_warmup >= max_steps
    if t_warmup > max_steps:
        log.warning(
            "scheduler.t_warmup=%r is %d steps, longer than the run (%d steps): the LR is still warming up "
            "when the run ends (at %.0f%% of its peak); "
            "shorten it (e.g. scheduler.t_warmup=0.1dur) if unintended",
            cfg.t_warmup,
            t_warmup,
            max_steps,
            100 * max_steps / t_warmup,
        )
    if isinstance(cfg, ConstantWithWarmupConfig):
        return functools.partial(constant_with_warmup, t_warmup=t_warmup, alpha=cfg.alpha)
    if isinstance(cfg, CosineWithWarmupConfig):
        return functools.partial(cosine_with_warmup, t_warmup=t_warmup, t_max=t_max, alpha_f=cfg.alpha_f)
    if isinstance(cfg, LinearDecayWithWarmupConfig):
        return functools.partial(
            linear_decay_with_warmup, t_warmup=t_warmup, t_max=t_max, alpha_i=cfg.alpha_i, alpha_f=cfg.alpha_f
        )
    if isinstance(cfg, InvSqrtWithWarmupConfig):
        t_scale, t_cooldown = steps("t_scale"), steps("t_cooldown")
        if t_scale <= 0:
            raise ValueError(f"scheduler.t_scale={cfg.t_scale!r} must be at least 1 step, got {t_scale}")
        if t_warmup + t_cooldown > t_max and not whole_run_warmup:
            raise ValueError(
                f"scheduler.t_cooldown={cfg.t_cooldown!r} ({t_cooldown} steps) plus t_warmup ({t_warmup} "
                f"steps) exceeds t_max ({t_max} steps); shorten the cooldown or the warmup"
            )
        return functools.partial(
            inv_sqrt_with_warmup,
            t_warmup=t_warmup,
            t_scale=t_scale,
            t_cooldown=t_cooldown,
            t_max=t_max,
            alpha_f_decay=cfg.alpha_f_decay,
            alpha_f_cooldown=cfg.alpha_f_cooldown,
        )
    if isinstance(cfg, WarmupStableDecayConfig):
        t_decay = steps("t_decay")
        if t_warmup + t_decay > t_max and not whole_run_warmup:
            raise ValueError(
                f"scheduler.t_decay={cfg.t_decay!r} ({t_decay} steps) plus t_warmup ({t_warmup} steps) "
                f"exceeds t_max ({t_max} steps); shorten the decay or the warmup"
            )
        return functools.partial(
            warmup_stable_decay,
            t_warmup=t_warmup,
            t_decay=t_decay,
            t_max=t_max,
            alpha_f=cfg.alpha_f,
            decay_shape=cfg.decay_shape,
        )
    raise ValueError(f"build_lr_lambda: unsupported scheduler config {type(cfg).__name__}")


def build_scheduler(
    cfg: SchedulerConfig,
    *,
    optimizer: Optimizer,
    max_steps: int,
    steps_per_epoch: int | None = None,
    samples_per_step: int | None = None,
    tokens_per_step: int | None = None,
    scale_schedule_ratio: float = 1.0,
) -> LambdaLR:
    """Wrap :func:`build_lr_lambda` in a ``LambdaLR``; call its ``step()`` once after every optimizer step.

    The LR of optimizer step ``k`` (0-based) is ``base_lr · α(k)``; the constructor applies ``α(0)``.

    Args:
        cfg: A schedule schema.
        optimizer: The optimizer whose groups' ``lr`` it drives (``base_lr`` = each group's ``initial_lr``).
        max_steps: Total optimizer steps of the run (after any scale-schedule ratio).
        steps_per_epoch: Optimizer steps per epoch, for ``ep`` durations.
        samples_per_step: Global samples per optimizer step, for ``sp`` durations.
        tokens_per_step: Global tokens per optimizer step, for ``tok`` durations.
        scale_schedule_ratio: Composer's SSR, see :func:`build_lr_lambda`.

    Returns:
        The scheduler; its ``state_dict()`` holds only the step counter
        (the schedule is rebuilt from ``cfg``).

    Raises:
        ValueError: As :func:`build_lr_lambda`.
    """
    lr_lambda = build_lr_lambda(
        cfg,
        max_steps=max_steps,
        steps_per_epoch=steps_per_epoch,
        samples_per_step=samples_per_step,
        tokens_per_step=tokens_per_step,
        scale_schedule_ratio=scale_schedule_ratio,
    )
    return LambdaLR(optimizer, lr_lambda)
