"""`pretrain(cfg, run_dir=...)`: build every component from the typed root config and run the trainer.

Design note: this is the only function that sees the whole `TrainConfig`; each builder gets its own
slice (`build_optimizer(cfg.optimizer, ...)`). Derived quantities (device batch, grad accumulation,
tokens per step, steps) are computed here from the few configured knobs, written to `run.json` and
printed, never configured.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from foundry.time import parse_duration, to_steps

if TYPE_CHECKING:
    from foundry.parallel.dist import DistContext

__all__ = ["pretrain", "resolve_device"]


def resolve_device(name: str) -> torch.device:
    """`auto` -> cuda when available, else cpu; other names as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "trainer.device=cuda but no CUDA device is available; use trainer.device=auto or cpu"
        )
    return torch.device(name)


def _expand_run_dir(cfg: Any, run_dir: Path) -> Any:  # noqa: ANN401 - TrainConfig in and out
    """`{run_dir}` in `checkpoint.save_folder` -> this run's directory (each sweep job gets its own)."""
    folder = cfg.checkpoint.save_folder
    if not folder or "{run_dir}" not in folder:
        return cfg
    return replace(
        cfg, checkpoint=replace(cfg.checkpoint, save_folder=folder.replace("{run_dir}", str(run_dir)))
    )


def _icl_tokenizer(cfg: Any) -> Any:  # noqa: ANN401
    """With no tokenizer configured, ICL evaluation during training is an error naming the fix (else None)."""
    from foundry.eval.config import load_task_configs
    from foundry.tokenizers import build_tokenizer

    if cfg.eval is not None and load_task_configs(cfg.eval):
        return build_tokenizer(cfg.tokenizer)  # raises: tokenizer.name is null, pass tokenizer.name=...
    return None


def _finished_message(cfg: Any, url: str, *, step: int, max_steps: int) -> str:  # noqa: ANN401
    """What a rerun of a finished run says (it then only re-evaluates the final model)."""
    from streaming.storage import redact

    folder = redact(cfg.checkpoint.save_folder)
    return (
        f"[foundry] run {cfg.run_name!r} already finished: autoresume loaded {redact(url)} (step {step} of "
        f"max_duration {cfg.trainer.max_duration} = {max_steps} steps), so there is nothing to train; evaluating "
        f"it. To train again from scratch delete {folder} (make clean) or pass another run_name=...; to train "
        "longer raise trainer.max_duration"
    )


def pretrain(cfg: Any, *, run_dir: str | Path) -> dict[str, float]:  # noqa: ANN401 - foundry.config.TrainConfig
    """Pretrains a causal LM as `cfg` describes (one process, or every rank of a `torchrun` launch).

    Args:
        cfg: The root `TrainConfig` (dataclasses all the way down).
        run_dir: Where `run.json`, `metrics.jsonl` and logger files go (written by rank 0 only).

    Returns:
        The final metrics (`train/loss`, `eval/loss`, `eval/perplexity`, throughput, ...), rank 0's on every rank.
    """
    from foundry.parallel.dist import init_distributed, teardown

    ctx = init_distributed(cfg.parallelism, device=resolve_device(cfg.trainer.device))
    try:
        return _pretrain(cfg, run_dir=run_dir, ctx=ctx)
    finally:
        teardown(ctx)


def _pretrain(cfg: Any, *, run_dir: str | Path, ctx: DistContext) -> dict[str, float]:  # noqa: ANN401
    from foundry.callbacks import build_callbacks
    from foundry.checkpoint.callback import attach_checkpointing, find_start
    from foundry.data.quickstart import QuickstartDataConfig, prepare_quickstart
    from foundry.data.text import build_text_dataloader, dataset_missing_message
    from foundry.eval.callback import icl_callbacks
    from foundry.loggers import build_loggers
    from foundry.models.build import build_model_for
    from foundry.optim import build_optimizer, build_scheduler
    from foundry.parallel import barrier, broadcast_object, wrap_model
    from foundry.tokenizers import build_tokenizer
    from foundry.train.batching import plan_batches
    from foundry.train.loop import Trainer
    from foundry.train.metadata import write_run_metadata
    from foundry.train.precision import resolve_precision
    from foundry.train.state import seed_all, set_deterministic
    from streaming.world import World

    run_dir = Path(run_dir)
    cfg = _expand_run_dir(cfg, run_dir)
    seed_all(cfg.seed)
    if cfg.trainer.deterministic:
        set_deterministic()
    device = ctx.device  # cuda:<LOCAL_RANK> under torchrun
    tc = replace(cfg.trainer, precision=resolve_precision(cfg.trainer.precision, device=device))
    max_seq_len = cfg.data.max_seq_len or getattr(cfg.model, "max_seq_len", None)
    if max_seq_len is None:
        raise ValueError("set data.max_seq_len (the model config has no max_seq_len)")
    if isinstance(cfg.data, QuickstartDataConfig):
        if not ctx.is_main:
            barrier()  # rank 0 builds the shared cache first; the others then find it complete
        prepare_quickstart(cfg.data, max_seq_len=max_seq_len)
        if ctx.is_main:
            barrier()
    for split in (cfg.data.train_split, cfg.data.eval_split):
        missing = split and dataset_missing_message(cfg.data, split)
        if missing:  # before the tokenizer, whose own (offline) error would hide this one
            raise FileNotFoundError(missing)
    # tokenizer.name=null (tokenizer=none): rows of token ids, checked against model.vocab_size by the collator
    tokenizer = build_tokenizer(cfg.tokenizer) if cfg.tokenizer.name is not None else None
    world = World.detect()
    plan = plan_batches(
        global_batch_size=tc.global_train_batch_size,
        world_size=world.num_ranks,
        microbatch=tc.device_train_microbatch_size,
    )
    common = {
        "tokenizer": tokenizer,
        "world": world,
        "max_seq_len": max_seq_len,
        "seed": cfg.seed,
        "vocab_size": getattr(cfg.model, "vocab_size", None),
    }
    train_loader = build_text_dataloader(
        cfg.data, device_batch_size=plan.device_batch_size, split=cfg.data.train_split, **common
    )
    eval_loader = None
    if cfg.data.eval_split:
        eval_bs = tc.device_eval_batch_size or plan.microbatch_size
        eval_loader = build_text_dataloader(
            cfg.data,
            device_batch_size=eval_bs,
            split=cfg.data.eval_split,
            shuffle=False,
            drop_last=False,
            **common,
        )
    steps_per_epoch = len(train_loader)
    if tc.train_subset_num_batches >= 0:
        steps_per_epoch = min(steps_per_epoch, tc.train_subset_num_batches)
    tokens_per_step = plan.global_batch_size * max_seq_len
    facts = {"steps_per_epoch": steps_per_epoch, "samples_per_step": plan.global_batch_size}
    max_steps = to_steps(parse_duration(tc.max_duration), tokens_per_step=tokens_per_step, **facts)
    eval_every = to_steps(
        parse_duration(tc.eval_interval), max_steps=max_steps, tokens_per_step=tokens_per_step, **facts
    )
    pc = cfg.parallelism
    model = build_model_for(cfg.model, tokenizer, device=device, defer_init=pc.strategy == "fsdp")
    if pc.distributed or pc.activation_checkpointing:  # before the optimizer sees the parameters
        model = wrap_model(model, cfg=pc, ctx=ctx, precision=tc.precision)
    optimizer = build_optimizer(cfg.optimizer, model=model)
    scheduler = build_scheduler(
        cfg.scheduler, optimizer=optimizer, max_steps=max_steps, tokens_per_step=tokens_per_step, **facts
    )
    derived = {
        "device_batch_size": plan.device_batch_size,
        "microbatch_size": plan.microbatch_size,
        "microbatches_per_step": plan.grad_accum,
        "tokens_per_step": tokens_per_step,
        "max_steps": max_steps,
        "steps_per_epoch": steps_per_epoch,
        "total_tokens": max_steps * tokens_per_step,
        "eval_interval_steps": eval_every,
        "n_params": sum(p.numel() for p in model.parameters()),
        "world_size": world.num_ranks,
        "parallelism": pc.strategy,
        "precision": tc.precision,
    }
    ck = cfg.checkpoint
    start = find_start(ck, run_name=cfg.run_name, run_dir=run_dir)
    resumed = start is not None and not start.weights_only
    resumed_manifest = start.info.manifest if start is not None and resumed else None
    loggers = []
    if ctx.is_main:  # every rank runs the same steps; only rank 0 writes metadata, logs and the console
        write_run_metadata(run_dir, config=cfg, derived=derived, device=device)
        loggers = build_loggers(
            cfg.logger,
            run_dir=run_dir,
            run_name=cfg.run_name,
            max_steps=max_steps,
            progress_bar=tc.progress_bar,
            resume_step=resumed_manifest.step if resumed_manifest is not None else None,
            wandb_run_id=resumed_manifest.extra.get("wandb_run_id") if resumed_manifest is not None else None,
        )
    for logger in loggers:
        logger.log_hyperparameters({"config": asdict(cfg), "derived": derived})
    trainer = Trainer(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        train_loader=train_loader,
        eval_loader=eval_loader,
        cfg=tc,
        plan=plan,
        max_steps=max_steps,
        eval_interval_steps=eval_every,
        max_seq_len=max_seq_len,
        device=device,
        loggers=loggers,
        callbacks=build_callbacks(cfg.callbacks)
        + icl_callbacks(
            cfg.eval, tokenizer=tokenizer if tokenizer is not None else _icl_tokenizer(cfg), run_dir=run_dir
        ),
    )
    attach_checkpointing(
        trainer,
        ck,
        start=start,
        run_name=cfg.run_name,
        run_dir=str(run_dir),
        save_every_steps=to_steps(
            parse_duration(ck.save_interval), max_steps=max_steps, tokens_per_step=tokens_per_step, **facts
        ),
        model_config=cfg.model,
        global_batch_size=plan.global_batch_size,
        wandb_run_id=next((run.id for lg in loggers if (run := getattr(lg, "run", None)) is not None), None),
    )
    if start is not None and resumed and trainer.state.step >= max_steps and ctx.is_main:
        print(
            _finished_message(cfg, start.info.url, step=trainer.state.step, max_steps=max_steps), flush=True
        )
    try:
        metrics = trainer.fit()
    finally:
        for logger in loggers:
            logger.close()
    if ctx.is_main:
        print(f"[foundry] run directory: {run_dir.resolve()}", flush=True)
    return broadcast_object(metrics)  # identical final metrics (and final_metrics.json bytes) on every rank
