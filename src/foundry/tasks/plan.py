"""`plan_run(cfg, world, ...) -> RunPlan`: every number a run derives from its config, computed once, purely.

Design note: the config names a few knobs (global batch, microbatch, durations as time strings, sequence
lengths); everything else a run needs (device batch, gradient accumulation, tokens per step, step counts and
intervals) is derived here, written to `run.json` (`RunPlan.derived`, with the resolved precision) and
printed, never configured. Nothing is built: the plan is a function of the config, the world and two facts
from outside it, the precision resolved for the training device (`resolve_precision`: the task resolves it
once, before building anything, as its memory and FP8 checks need it too) and the training loader's batches
per epoch (durations in `ep`; the only number that needs the dataset, so a task builds its data loaders from
`resolve_max_seq_len` and `batch_plan`, then plans). Mistakes a user fixes in the config raise
`foundry.errors.ConfigError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from foundry.config import TrainConfig
from foundry.errors import ConfigError
from foundry.time import parse_duration, to_steps
from foundry.train.batching import BatchPlan, plan_batches
from streaming.reader.world import World

__all__ = ["RunPlan", "batch_plan", "plan_run", "resolve_max_seq_len"]


@dataclass(frozen=True)
class RunPlan:
    """The derived quantities of one run (see `plan_run`)."""

    max_seq_len: int
    """Tokens per training row: `data.max_seq_len`, else `model.max_seq_len`."""
    batches: BatchPlan
    """Global batch -> device batch -> microbatches."""
    eval_batch_size: int
    """Samples per eval batch on one rank: `trainer.device_eval_batch_size`, else the microbatch size."""
    tokens_per_step: int
    """Tokens per optimizer step over all ranks (global batch x `max_seq_len`)."""
    steps_per_epoch: int
    """Optimizer steps in one epoch (the loader's batches, capped by `trainer.train_subset_num_batches`)."""
    max_steps: int
    """`trainer.max_duration` in optimizer steps."""
    eval_interval_steps: int
    """`trainer.eval_interval` in steps (0: evaluate only at the end)."""
    save_interval_steps: int
    """`checkpoint.save_interval` in steps."""
    log_interval_steps: int
    """`trainer.log_interval` (already in steps)."""
    world_size: int
    """Ranks running each step."""
    parallelism: str
    """`parallelism.strategy`."""
    precision: str
    """`trainer.precision` with `auto` resolved for the device (`foundry.precision.resolve_precision`)."""

    @property
    def total_tokens(self) -> int:
        """Tokens the whole run trains on."""
        return self.max_steps * self.tokens_per_step

    @property
    def time_facts(self) -> dict[str, int]:
        """What `foundry.time.to_steps` (and the LR scheduler) needs to turn any duration into steps."""
        return {
            "max_steps": self.max_steps,
            "steps_per_epoch": self.steps_per_epoch,
            "samples_per_step": self.batches.global_batch_size,
            "tokens_per_step": self.tokens_per_step,
        }

    def derived(self, *, n_params: int) -> dict[str, Any]:
        """The `derived` section of `run.json` (and the loggers' hyperparameters); `n_params` of the model."""
        return {
            "device_batch_size": self.batches.device_batch_size,
            "microbatch_size": self.batches.microbatch_size,
            "microbatches_per_step": self.batches.grad_accum,
            "tokens_per_step": self.tokens_per_step,
            "max_steps": self.max_steps,
            "steps_per_epoch": self.steps_per_epoch,
            "total_tokens": self.total_tokens,
            "eval_interval_steps": self.eval_interval_steps,
            "n_params": n_params,
            "world_size": self.world_size,
            "parallelism": self.parallelism,
            "precision": self.precision,
        }


def resolve_max_seq_len(cfg: TrainConfig) -> int:
    """The run's row length: `data.max_seq_len`, else `model.max_seq_len` (every task uses this one rule).

    Raises:
        ConfigError: `data.max_seq_len` exceeds `model.max_seq_len` (the position tables are sized to the
            model's), or neither is set (a model config without `max_seq_len`).
    """
    data_len: int | None = cfg.data.max_seq_len
    model_len: int | None = getattr(cfg.model, "max_seq_len", None)
    model_name = type(cfg.model).__name__
    if data_len is not None and model_len is not None and data_len > model_len:
        raise ConfigError(
            f"data.max_seq_len={data_len} is longer than model.max_seq_len={model_len}: the model cannot "
            f"attend over rows that long; lower data.max_seq_len (or leave it null to use {model_len}), or "
            "raise model.max_seq_len"
        )
    if data_len is not None:
        return data_len
    if model_len is None:
        raise ConfigError(
            f"data.max_seq_len is null and the model config ({model_name}) has no max_seq_len: "
            "set data.max_seq_len=<tokens per row>"
        )
    return model_len


def batch_plan(cfg: TrainConfig, world: World) -> BatchPlan:
    """`trainer.global_train_batch_size` split over the world's ranks and microbatches.

    Raises:
        ConfigError: The global batch does not divide over the ranks (the message names the field).
    """
    try:
        return plan_batches(
            global_batch_size=cfg.trainer.global_train_batch_size,
            world_size=world.num_ranks,
            microbatch=cfg.trainer.device_train_microbatch_size,
        )
    except ValueError as err:
        raise ConfigError(str(err)) from err


def _steps(field: str, value: str | int, **facts: int) -> int:
    """`value` (a duration of config field `field`) in optimizer steps;
    a unit it cannot convert names the field."""
    try:
        return to_steps(parse_duration(value), **facts)
    except ValueError as err:
        raise ConfigError(f"{field}={value!r}: {err}") from err


def plan_run(cfg: TrainConfig, world: World, *, batches_per_epoch: int, precision: str) -> RunPlan:
    """Every derived quantity of the run `cfg` describes, for `world` (nothing is built).

    Args:
        cfg: The validated root config.
        world: The ranks the run trains on (`world.num_ranks` splits the global batch).
        batches_per_epoch: Batches the training loader yields per epoch on one rank (`len(loader)`).
        precision: `trainer.precision` resolved for the training device (`resolve_precision`).

    Returns:
        The plan.

    Raises:
        ConfigError: A sequence length, batch size or duration the plan cannot honour, naming the field.
    """
    tc = cfg.trainer
    max_seq_len = resolve_max_seq_len(cfg)
    batches = batch_plan(cfg, world)
    tokens_per_step = batches.global_batch_size * max_seq_len
    steps_per_epoch = batches_per_epoch
    if tc.train_subset_num_batches >= 0:
        steps_per_epoch = min(steps_per_epoch, tc.train_subset_num_batches)
    facts = {
        "steps_per_epoch": steps_per_epoch,
        "samples_per_step": batches.global_batch_size,
        "tokens_per_step": tokens_per_step,
    }
    max_steps = _steps("trainer.max_duration", tc.max_duration, **facts)
    return RunPlan(
        max_seq_len=max_seq_len,
        batches=batches,
        eval_batch_size=tc.device_eval_batch_size or batches.microbatch_size,
        tokens_per_step=tokens_per_step,
        steps_per_epoch=steps_per_epoch,
        max_steps=max_steps,
        eval_interval_steps=_steps("trainer.eval_interval", tc.eval_interval, max_steps=max_steps, **facts),
        save_interval_steps=_steps(
            "checkpoint.save_interval", cfg.checkpoint.save_interval, max_steps=max_steps, **facts
        ),
        log_interval_steps=tc.log_interval,
        world_size=world.num_ranks,
        parallelism=cfg.parallelism.strategy,
        precision=precision,
    )
