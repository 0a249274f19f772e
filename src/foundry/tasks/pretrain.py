"""`task=pretrain`: plan -> build (data, model stack, observers) -> run (`Trainer.fit`).

Design note: this is the only code that sees the whole `TrainConfig`; each builder gets its own slice
(`build_optimizer(cfg.optimizer, ...)`). The process group is joined once (`init_distributed`) and the world
derived from it once (`process_world`), then passed to the data loaders and the speed monitor. Every derived
number comes from `plan_run` (pure, unit-tested), is written to `run.json` and printed, never configured; the
plan needs one fact from the data (batches per epoch), so the loaders are built from the plan's sequence
length and batch split first. Only rank 0 writes metadata, logs and the console; every rank runs the same
steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from foundry.callbacks import Callback, build_callbacks
from foundry.checkpoint.callback import attach_checkpointing, find_start
from foundry.checkpoint.layout import fill_save_folder
from foundry.checkpoint.resume import StartPoint, load_into
from foundry.compat.composer import as_foundry_start
from foundry.config import TrainConfig
from foundry.data.config import QuickstartDataConfig, TextDataConfig
from foundry.data.documents import DocumentRule
from foundry.data.quickstart import prepare_quickstart
from foundry.data.text import build_text_dataloader, missing_data
from foundry.env_refs import keep_env_refs
from foundry.errors import ConfigError, ResumeMismatch
from foundry.eval.callback import icl_callbacks
from foundry.eval.config import load_task_configs
from foundry.loggers import Logger, build_loggers
from foundry.models.build import build_model_on
from foundry.optim import build_optimizer, build_scheduler
from foundry.parallel.dist import (
    DistContext,
    barrier,
    broadcast_object,
    init_distributed,
    process_world,
    resolve_device,
    teardown,
)
from foundry.parallel.wrap import wrap_model
from foundry.precision import resolve_precision
from foundry.rundir import layout
from foundry.rundir.record import RunRecord
from foundry.tasks.memory import check_memory
from foundry.tasks.plan import RunPlan, batch_plan, plan_run, resolve_max_seq_len
from foundry.tasks.resume_message import resume_refusal
from foundry.tokenizers import build_tokenizer
from foundry.train.float8 import check_float8_device, convert_to_float8
from foundry.train.loop import Trainer
from foundry.train.metadata import write_run_metadata
from foundry.train.preemption import Preempted
from foundry.train.speed import apply_speed
from foundry.train.state import seed_all, set_deterministic
from streaming.reader.world import World
from streaming.storage import redact

__all__ = ["DataBuilder", "RunData", "build_data", "pretrain", "trainable_summary"]


@dataclass(frozen=True)
class RunData:
    """What the data step builds: the tokenizer (None for rows of token ids) and the split loaders."""

    tokenizer: Any
    train: Any
    """The training `StreamingDataLoader`."""
    eval: Any | None
    """The eval split's loader, or None without `data.eval_split`."""
    stream_names: list[str] | None = None
    """A mixture's stream names (`Trainer(stream_names=)`), None for data without streams."""


class DataBuilder(Protocol):
    """Builds a run's data step (`build_data` for text; `foundry.tasks.finetune` has its own)."""

    def __call__(self, cfg: TrainConfig, *, world: World, is_main: bool) -> RunData: ...


@dataclass(frozen=True)
class ModelStack:
    """The model (wrapped for its parallelism) with its optimizer and LR scheduler."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any


def pretrain(
    cfg: TrainConfig,
    *,
    run_dir: str | Path,
    data_builder: DataBuilder | None = None,
    record: RunRecord | None = None,
) -> dict[str, float]:
    """Pretrains a causal LM as `cfg` describes (one process, or every rank of a `torchrun` launch).

    Args:
        cfg: The root `TrainConfig` (dataclasses all the way down).
        run_dir: Where `run.json`, `metrics.jsonl` and logger files go (written by rank 0 only).
        data_builder: Builds the data step (`build_data`, the text loaders, by default; `task=finetune` passes
            its own, everything else is shared).
        record: Opened once the data is built and the start checkpoint loaded, before any file of the run is
            written (`run_task` passes the job's; None: a record with nothing to write but `run_dir` itself).

    Returns:
        The final metrics (`train/loss`, `eval/loss`, `eval/perplexity`, throughput, ...),
        rank 0's on every rank.

    Raises:
        ConfigError: Among others, the checkpoint autoresume found was trained on another model or data (the
            message names the run and the checkpoint).
    """
    ctx = init_distributed(cfg.parallelism, device=resolve_device(cfg.trainer.device))
    try:
        cfg = _expand_run_dir(cfg, Path(run_dir))
        record = record or RunRecord(Path(run_dir), is_main=ctx.is_main)
        metrics = _pretrain(
            cfg, run_dir=Path(run_dir), ctx=ctx, data_builder=data_builder or build_data, record=record
        )
        barrier()  # every rank got here: no collective still winding down when teardown destroys the group
        return metrics
    finally:
        teardown(ctx)


def _pretrain(
    cfg: TrainConfig, *, run_dir: Path, ctx: DistContext, data_builder: DataBuilder, record: RunRecord
) -> dict[str, float]:
    world = process_world(ctx)
    cfg, speed = apply_speed(cfg, device=ctx.device)
    if speed is not None and ctx.is_main:
        print(f"[foundry] {speed}", flush=True)
    seed_all(cfg.seed)
    if cfg.trainer.deterministic:
        set_deterministic()
    precision = resolve_precision(cfg.trainer.precision, device=ctx.device)
    # no FP8 hardware or no torchao: refused before anything is built
    if precision == "amp_fp8":
        check_float8_device(ctx.device)
    # a model that cannot fit is refused before the data is built or anything allocated
    check_memory(cfg, device=ctx.device, world=world, precision=precision)
    data = data_builder(cfg, world=world, is_main=ctx.is_main)
    plan = plan_run(cfg, world, batches_per_epoch=len(data.train), precision=precision)
    stack = build_model_stack(cfg, plan, tokenizer=data.tokenizer, ctx=ctx)
    start = find_start(
        cfg.checkpoint, run_name=cfg.run_name, run_dir=run_dir, adapt_load_path=as_foundry_start
    )
    trainer = Trainer(
        model=stack.model,
        optimizer=stack.optimizer,
        scheduler=stack.scheduler,
        train_loader=data.train,
        eval_loader=data.eval,
        cfg=replace(cfg.trainer, precision=plan.precision),
        plan=plan.batches,
        max_steps=plan.max_steps,
        eval_interval_steps=plan.eval_interval_steps,
        max_seq_len=plan.max_seq_len,
        device=ctx.device,
        stream_names=data.stream_names,
        callbacks=build_run_callbacks(cfg, plan, tokenizer=data.tokenizer, run_dir=run_dir),
    )
    # every check of the checkpoint against this config, before the run is accepted
    if start is not None:
        _resume(trainer, cfg, start=start, run_dir=run_dir, ctx=ctx, named=record.named)
    # accepted: from here on the run's files are written
    record.open()
    loggers = build_observers(
        cfg, plan, model=stack.model, start=start, run_dir=run_dir, ctx=ctx, record=record
    )
    trainer.loggers = loggers
    attach_checkpointing(
        trainer,
        cfg.checkpoint,
        run_name=cfg.run_name,
        run_dir=str(run_dir),
        save_every_steps=plan.save_interval_steps,
        model_config=cfg.model,
        global_batch_size=plan.batches.global_batch_size,
        wandb_run_id=next((wb.id for lg in loggers if (wb := getattr(lg, "run", None)) is not None), None),
    )
    return run_training(trainer, cfg, plan, start=start, loggers=loggers, run_dir=run_dir, ctx=ctx)


def _resume(
    trainer: Trainer, cfg: TrainConfig, *, start: StartPoint, run_dir: Path, ctx: DistContext, named: bool
) -> None:
    """Loads `start` into `trainer`; a checkpoint of another model or data is refused naming run and
    checkpoint."""
    try:
        load_into(
            trainer,
            start,
            cfg=cfg.checkpoint,
            cache_root=str(run_dir / layout.CHECKPOINT_CACHE),
            model_config=asdict(cfg.model),
            global_batch_size=trainer.plan.global_batch_size,
            local_rank=ctx.local_rank,
        )
    except ResumeMismatch as err:
        if start.source != "autoresume":
            raise
        raise resume_refusal(err, run_name=cfg.run_name, checkpoint=start.info.url, named=named) from err


def _expand_run_dir(cfg: TrainConfig, run_dir: Path) -> TrainConfig:
    """`{run_dir}` in `checkpoint.save_folder` -> this run's directory (each sweep job gets its own)."""
    folder = cfg.checkpoint.save_folder
    if not folder or "{run_dir}" not in folder:
        return cfg
    filled = fill_save_folder(folder, run_dir=run_dir)
    return replace(cfg, checkpoint=replace(cfg.checkpoint, save_folder=filled))


def build_data(cfg: TrainConfig, *, world: World, is_main: bool) -> RunData:
    """The tokenizer and the loaders of the train and eval splits
    (the quick-start corpus built first if needed).

    Raises:
        FileNotFoundError: A local split is absent (before the tokenizer, whose own error would hide this
            one).
        ConfigError: The sequence length or batch size cannot be planned (see `foundry.tasks.plan`).
    """
    data = cfg.data
    if not isinstance(data, TextDataConfig):
        raise ConfigError(
            f"{type(data).__name__} is not text data: task=pretrain needs data=quickstart|c4|..."
        )
    max_seq_len = resolve_max_seq_len(cfg)
    batches = batch_plan(cfg, world)
    if isinstance(data, QuickstartDataConfig):
        if not is_main:
            # rank 0 builds the shared cache first; the others then find it complete
            barrier()
        built = prepare_quickstart(data, max_seq_len=max_seq_len)
        if is_main:
            barrier()
        # read this build's own folder (keyed by its parameters, never modified once published)
        data = replace(data, local=str(built))
    missing = missing_data(data)
    if missing:
        raise FileNotFoundError(missing)
    # tokenizer.name=null (tokenizer=none): rows of token ids,
    # checked against model.vocab_size by the collator
    tokenizer = build_tokenizer(cfg.tokenizer) if cfg.tokenizer.name is not None else None
    common: dict[str, Any] = {
        "tokenizer": tokenizer,
        "world": world,
        "max_seq_len": max_seq_len,
        "seed": cfg.seed,
        "vocab_size": getattr(cfg.model, "vocab_size", None),
        "documents": DocumentRule.from_tokenizer(tokenizer) if cfg.model.uses_sequence_id() else None,
        # data.pin_memory=null pins for cuda
        "device_type": resolve_device(cfg.trainer.device).type,
    }
    train = build_text_dataloader(data, device_batch_size=batches.device_batch_size, **common)
    eval_loader = None
    if data.eval_split or any(s.eval_split for s in data.streams.values()):
        eval_loader = build_text_dataloader(
            data,
            device_batch_size=cfg.trainer.device_eval_batch_size or batches.microbatch_size,
            evaluate=True,
            **common,
        )
    return RunData(tokenizer=tokenizer, train=train, eval=eval_loader, stream_names=data.stream_names)


def build_model_stack(cfg: TrainConfig, plan: RunPlan, *, tokenizer: Any, ctx: DistContext) -> ModelStack:
    """The model on this rank's device (wrapped for DDP/FSDP before the optimizer sees it),
    optimizer, scheduler."""
    pc = cfg.parallelism
    model = build_model_on(
        cfg.model, device=ctx.device, tokenizer=tokenizer, defer_init=pc.strategy == "fsdp"
    )
    # FSDP over several ranks all-gathers the converted weights in FP8
    if plan.precision == "amp_fp8":
        convert_to_float8(
            model,
            fsdp_all_gather=pc.strategy == "fsdp" and ctx.world_size > 1,
            recipe=cfg.trainer.fp8_recipe,
            min_dim=cfg.trainer.fp8_min_dim,
        )
    if pc.distributed or pc.activation_checkpointing:
        model = wrap_model(model, cfg=pc, ctx=ctx, precision=plan.precision)
    optimizer = build_optimizer(cfg.optimizer, model=model)
    scheduler = build_scheduler(cfg.scheduler, optimizer=optimizer, **plan.time_facts)
    return ModelStack(model=model, optimizer=optimizer, scheduler=scheduler)


def build_observers(
    cfg: TrainConfig,
    plan: RunPlan,
    *,
    model: torch.nn.Module,
    start: StartPoint | None,
    run_dir: Path,
    ctx: DistContext,
    record: RunRecord | None = None,
) -> list[Logger]:
    """Rank 0: writes `run.json` and returns the loggers (resuming the step count and W&B run); others: [].
    Both record the config with its environment values as `${oc.env:...}` (`record.env_refs`)."""
    if not ctx.is_main:
        return []
    config = keep_env_refs(asdict(cfg), record.env_refs if record is not None else {})
    derived = plan.derived(n_params=sum(p.numel() for p in model.parameters()))
    if (line := trainable_summary(model)) is not None:
        print(f"[foundry] {line}", flush=True)
    write_run_metadata(run_dir, config=config, derived=derived, device=ctx.device)
    resumed = start.info.manifest if start is not None and not start.weights_only else None
    loggers = build_loggers(
        cfg.logger,
        run_dir=run_dir,
        run_name=cfg.run_name,
        max_steps=plan.max_steps,
        progress_bar=cfg.trainer.progress_bar,
        resume_step=resumed.step if resumed is not None else None,
        wandb_run_id=resumed.extra.get("wandb_run_id") if resumed is not None else None,
    )
    for logger in loggers:
        logger.log_hyperparameters({"config": config, "derived": derived})
    return loggers


def trainable_summary(model: torch.nn.Module) -> str | None:
    """`trainable params: 1,234 of 5,678 (21.73%)` when only part of the model trains
    (LoRA, frozen weights)."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if trainable == total or total == 0:
        return None
    return f"trainable params: {trainable:,} of {total:,} ({100 * trainable / total:.2f}%)"


def build_run_callbacks(cfg: TrainConfig, plan: RunPlan, *, tokenizer: Any, run_dir: Path) -> list[Callback]:
    """The configured callbacks, then ICL evaluation
    (which needs a tokenizer: none configured names the fix)."""
    if tokenizer is None and cfg.eval is not None and load_task_configs(cfg.eval):
        # raises: tokenizer.name is null, pass tokenizer.name=...
        tokenizer = build_tokenizer(cfg.tokenizer)
    configured = build_callbacks(
        cfg.callbacks,
        world_size=plan.world_size,
        model_config=cfg.model,
        tokenizer=tokenizer,
        run_dir=run_dir,
    )
    return configured + icl_callbacks(cfg.eval, tokenizer=tokenizer, run_dir=run_dir)


def run_training(
    trainer: Trainer,
    cfg: TrainConfig,
    plan: RunPlan,
    *,
    start: StartPoint | None,
    loggers: list[Logger],
    run_dir: Path,
    ctx: DistContext,
) -> dict[str, float]:
    """`trainer.fit()` (a finished run only re-evaluates, and says so);
    rank 0's final metrics on every rank."""
    finished = start is not None and not start.weights_only and trainer.state.step >= plan.max_steps
    if finished and start is not None and ctx.is_main:
        print(
            _finished_message(cfg, start.info.url, step=trainer.state.step, max_steps=plan.max_steps),
            flush=True,
        )
    try:
        metrics = trainer.fit()
    except Preempted as stopped:
        # a preemption's requeue reruns the same command
        if ctx.is_main and stopped.signal_name == "SIGINT":
            print(f"[foundry] {_resume_line(cfg)}", flush=True)
        raise
    finally:
        for logger in loggers:
            logger.close()
    if ctx.is_main:
        print(f"[foundry] run directory: {run_dir.resolve()}", flush=True)
    # identical final metrics (and final_metrics.json bytes) on every rank
    return broadcast_object(metrics)


def _resume_line(cfg: TrainConfig) -> str:
    """What to run to continue a run stopped by Ctrl-C."""
    if not cfg.checkpoint.save_folder:
        return "no checkpoint was saved (checkpoint.save_folder is not set): a rerun starts over"
    return (
        f"to resume: rerun the same command with run_name={cfg.run_name} (`python -m foundry.runs resume "
        f"{cfg.run_name}` prints it)"
    )


def _finished_message(cfg: TrainConfig, url: str, *, step: int, max_steps: int) -> str:
    """What a rerun of a finished run says (it then only re-evaluates the final model)."""
    folder = redact(cfg.checkpoint.save_folder or "")
    return (
        f"[foundry] run {cfg.run_name!r} already finished: autoresume loaded {redact(url)} (step {step} of "
        f"max_duration {cfg.trainer.max_duration} = {max_steps} steps), so there is nothing to train; "
        f"evaluating it. To train again from scratch delete {folder} (make clean) or pass another "
        "run_name=...; to train longer raise trainer.max_duration"
    )
