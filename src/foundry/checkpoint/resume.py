"""Starting from a checkpoint: autoresume, `load_path`, weights-only loading, and the checks around them.

Design note: autoresume wins over `load_path` (as in Composer: `load_path` is for the very first launch, e.g.
fine-tuning from pretrained weights), it is on by default whenever `save_folder` is set, and it always says
what it did: the checkpoint it loaded, or that it found none and starts fresh. A resumed run must be the same
model: the manifest's model config is compared field by field and a mismatch names every differing field.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from torch import nn

from foundry.checkpoint.config import CheckpointConfig
from foundry.checkpoint.layout import (
    HASH,
    MANIFEST,
    CheckpointInfo,
    fill_save_folder,
    find_checkpoints,
    open_checkpoint,
)
from foundry.checkpoint.state import (
    COMMON_FILE,
    MODEL_FILE,
    STATE_FILE,
    WeightMismatch,
    load_full,
    load_sharded,
)
from foundry.checkpoint.store import CheckpointStore, transfer_policy
from foundry.errors import ConfigError, ResumeMismatch
from foundry.parallel.dist import barrier, rank, world_size
from foundry.rng import set_rng_state
from foundry.rundir import layout
from streaming.format.hashing import hash_file
from streaming.safepath import safe_join
from streaming.storage import redact

if TYPE_CHECKING:
    from foundry.train.loop import Trainer

__all__ = [
    "StartPoint",
    "config_differences",
    "fetch",
    "load_into",
    "load_weights",
    "LoadPathAdapter",
    "resolve_start",
    "weight_mismatch_error",
]

log = logging.getLogger(__name__)
DCP_METADATA = ".metadata"
"""The pickled metadata file of a sharded checkpoint (always digest-checked before it is read)."""


@dataclass(frozen=True)
class StartPoint:
    """The checkpoint a run starts from, and how."""

    info: CheckpointInfo
    source: str
    """`autoresume` or `load_path`."""
    weights_only: bool


class LoadPathAdapter(Protocol):
    """Turns a `checkpoint.load_path` in a foreign format into a checkpoint of ours
    (else returns it as is)."""

    def __call__(self, path: str, *, scratch: str, weights_only: bool, rank: int) -> str: ...


def resolve_start(
    cfg: CheckpointConfig, *, run_name: str, scratch: str, adapt_load_path: LoadPathAdapter | None = None
) -> StartPoint | None:
    """The newest complete checkpoint in `save_folder` (autoresume), else `load_path`, else None.

    `adapt_load_path(path, scratch=, weights_only=, rank=)` may turn a `load_path` in another format into
    one of ours (the task passes `foundry.compat.composer.as_foundry_start`; this package knows no other
    formats, so it never imports `foundry.compat`)."""
    # resume_enabled implies a save_folder
    if cfg.resume_enabled and cfg.save_folder:
        folder = fill_save_folder(cfg.save_folder, run_name=run_name)
        found = find_checkpoints(
            CheckpointStore(folder, policy=transfer_policy(cfg.transfer_budget)), scratch=scratch
        )
        latest = newest_intact(found, warn=rank() == 0)
        if latest is not None:
            return StartPoint(latest, "autoresume", weights_only=False)
        if rank() == 0:
            print(
                f"[foundry] autoresume: no complete checkpoint in {redact(folder)}; starting fresh",
                flush=True,
            )
    if cfg.load_path:
        path = cfg.load_path
        if adapt_load_path is not None:
            path = adapt_load_path(path, scratch=scratch, weights_only=cfg.load_weights_only, rank=rank())
        info = open_checkpoint(path, scratch=scratch)
        weights_only = cfg.load_weights_only or info.manifest.weights_only
        return StartPoint(info, "load_path", weights_only=weights_only)
    return None


def _plain(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def config_differences(saved: dict[str, Any], current: dict[str, Any], prefix: str = "model") -> list[str]:
    """`model.d_model: checkpoint 64, config 128` lines for every differing (nested) field."""
    saved, current = _plain(saved), _plain(current)
    out: list[str] = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key, "<absent>"), current.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_differences(a, b, f"{prefix}.{key}")
        elif a != b:
            out.append(f"{prefix}.{key}: checkpoint {a!r}, config {b!r}")
    return out


def _needed(info: CheckpointInfo, weights_only: bool) -> list[str]:
    files = list(info.manifest.files)
    if not weights_only:
        return files
    if info.manifest.format == "full":
        return [MODEL_FILE]
    return [f for f in files if f not in (STATE_FILE, COMMON_FILE) and not f.startswith("rank")]


def _damage(directory: str, info: CheckpointInfo, names: list[str]) -> str | None:
    """The first of `names` whose local copy differs from the manifest's size or sha256 (the message naming
    it), or None."""
    for rel in names:
        meta = info.manifest.files.get(rel)
        if meta is None:
            continue
        path = safe_join(directory, rel, source=redact(info.url), field="files")
        size = os.path.getsize(path) if os.path.exists(path) else None
        if size != meta["bytes"] or hash_file(HASH, path) != meta[HASH]:
            return (
                f"{redact(path)}: does not match {redact(info.url)}/{MANIFEST} (expected {meta['bytes']} "
                f"bytes, {HASH} {meta[HASH]}; found {'no file' if size is None else f'{size} bytes'}): the "
                "checkpoint was modified or damaged after it was saved"
            )
    return None


def _verify(directory: str, info: CheckpointInfo, names: list[str]) -> None:
    """Checks the local copies of `names` against the manifest's sizes and sha256 (names the bad file)."""
    damage = _damage(directory, info, names)
    if damage is not None:
        raise ValueError(f"{damage}; load another one")


def local_damage(info: CheckpointInfo) -> str | None:
    """For a checkpoint on local disk: why one of its files differs from its manifest (every file's size and
    sha256 checked), else None. Remote checkpoints are checked as their files are downloaded (None here)."""
    local = info.store.local_path(info.name)
    return None if local is None else _damage(local, info, sorted(info.manifest.files))


def newest_intact(found: list[CheckpointInfo], *, warn: bool) -> CheckpointInfo | None:
    """The newest of `found` (oldest first) whose local files match their manifest; each damaged one newer
    than it is skipped with a warning on stderr naming the file (issue 39: one flipped bit in a local
    `model.pt` used to be resumed silently)."""
    for info in reversed(found):
        damage = local_damage(info)
        if damage is None:
            return info
        if warn:
            print(
                f"[foundry] warning: autoresume skips {redact(info.url)}: {damage}",
                file=sys.stderr,
                flush=True,
            )
    return None


def fetch(
    info: CheckpointInfo,
    *,
    cache_root: str,
    weights_only: bool = False,
    local_rank: int = 0,
    verified: bool = False,
) -> str:
    """A local directory holding the checkpoint's files (downloaded and digest-checked when remote).

    Every manifest file name is joined with `streaming.safepath.safe_join` (it never leaves the folder), and
    the pickled DCP `.metadata` of a sharded checkpoint is digest-checked in a local folder too. Under a
    process group, local rank 0 of each node downloads and the others wait at a barrier.
    """
    local = info.store.local_path(info.name)
    # every file this load reads, as a download is checked (unless `newest_intact` did)
    if local is not None:
        if not verified:
            _verify(local, info, sorted({DCP_METADATA, *_needed(info, weights_only)}))
        return local
    source = redact(info.url)
    target = safe_join(cache_root, info.name, source=source, field="checkpoint name")
    if local_rank == 0:
        for rel in _needed(info, weights_only):
            meta = info.manifest.files[rel]
            path = safe_join(target, rel, source=f"{source}/{MANIFEST}", field="files")
            if os.path.exists(path) and os.path.getsize(path) == meta["bytes"]:
                continue
            info.store.get(f"{info.name}/{rel}", path, expected={HASH: meta[HASH]}, algo=HASH)
        # also when an earlier download left it in the cache
        _verify(target, info, [DCP_METADATA])
    barrier()
    return target


def load_into(
    trainer: Trainer,
    start: StartPoint,
    *,
    cfg: CheckpointConfig,
    cache_root: str,
    model_config: dict[str, Any] | None = None,
    global_batch_size: int | None = None,
    local_rank: int = 0,
) -> None:
    """Loads `start` into the trainer (everything, or the weights only) and reports what it loaded."""
    info, m = start.info, start.info.manifest
    if start.source == "autoresume" and model_config is not None and m.model_config:
        diffs = config_differences(m.model_config, model_config)
        if diffs:
            raise ResumeMismatch(
                f"autoresume: {redact(info.url)} was saved with a different model config:\n  "
                + "\n  ".join(diffs)
                + "\nRestore those values to resume this run, or start a new one (another run_name or "
                "checkpoint.save_folder; "
                "checkpoint.load_path + load_weights_only=true to start from its weights)",
                detail="a different model config:\n  " + "\n  ".join(diffs),
                what="model",
            )
    if (
        start.source == "load_path"
        and not start.weights_only
        and (model_config or {}).get("peft_config") is not None
        and not m.model_config.get("peft_config")
    ):
        raise ValueError(
            f"checkpoint.load_path={redact(info.url)} holds a model without LoRA adapters and "
            "model.peft_config is set: its optimizer state cannot continue an adapter run; add "
            "checkpoint.load_weights_only=true to start the adapters from its weights"
        )
    saved_gbs = m.extra.get("global_train_batch_size")
    if not start.weights_only and global_batch_size and saved_gbs and saved_gbs != global_batch_size:
        log.warning(
            "resuming with global_train_batch_size=%s but the checkpoint was trained with %s: the data order "
            "will not continue exactly",
            global_batch_size,
            saved_gbs,
        )
    t0 = time.perf_counter()
    if m.adapters_only:
        _load_base(trainer.model, start, cfg=cfg, cache_root=cache_root, local_rank=local_rank)
    # an autoresumed checkpoint's files were all checked when it was chosen
    directory = fetch(
        info,
        cache_root=cache_root,
        weights_only=start.weights_only,
        local_rank=local_rank,
        verified=start.source == "autoresume",
    )
    optimizer = None if start.weights_only else trainer.optimizer
    strict, allow_pickle, this_rank = cfg.load_strict, cfg.allow_pickle, rank()
    try:
        if m.format == "full":
            out = load_full(
                directory,
                trainer.model,
                optimizer,
                strict=strict,
                allow_pickle=allow_pickle,
                rank=this_rank,
                adapters_only=m.adapters_only,
            )
        else:
            out = load_sharded(
                directory,
                trainer.model,
                optimizer,
                saved_world=m.world_size,
                strict=strict,
                allow_pickle=allow_pickle,
                rank=this_rank,
            )
    except WeightMismatch as err:
        diffs = config_differences(m.model_config, model_config) if m.model_config and model_config else []
        # the values that decide which tensors exist
        diffs = [d for d in diffs if not behaviour_only(d)]
        raise weight_mismatch_error(err, start=start, diffs=diffs, strict=strict) from err
    if out is not None:
        # a value of the wrong type in a checkpoint's run state is the checkpoint's fault: one line
        try:
            trainer.load_run_state(out["run"])
            if out["rng"] is not None:
                set_rng_state(out["rng"])
        except (KeyError, TypeError, AttributeError, IndexError, RuntimeError) as err:
            raise ValueError(
                f"{redact(info.url)}: its run state (counters, scheduler, data position, RNG) cannot be "
                f"restored ({type(err).__name__}: {' '.join(str(err).split())[:300]})"
            ) from None
    if rank() == 0:
        what = (
            "weights only"
            if start.weights_only
            else "model, optimizer, scheduler, counters, RNG, data position"
        )
        size = sum(meta["bytes"] for meta in m.files.values()) / 1e6
        print(
            f"[foundry] {start.source}: loaded {redact(info.url)} (step {m.step}, epoch {m.epoch}, "
            f"{m.format}, saved by {m.world_size} rank(s), now {world_size()}; {what}; {size:.1f} MB in "
            f"{time.perf_counter() - t0:.2f} s)",
            flush=True,
        )


NO_WEIGHTS = frozenset({
    "attn_uses_sequence_id", "attn_impl", "attn_pdrop", "resid_pdrop", "emb_pdrop", "softmax_scale",
    "clip_qkv", "sliding_window_size", "alibi_bias_max", "rope_theta", "rope_impl", "rope_dail_config",
    "rope_hf_config", "init_config", "init_device", "loss_fn", "logit_scale", "use_cache", "verbose",
})  # fmt: skip
"""Model config keys that change what the model computes, not which tensors it has or their shapes."""


def behaviour_only(diff: str) -> bool:
    """Whether a `config_differences` line is about a key in `NO_WEIGHTS` (issue 40: a checkpoint that did not
    fit named the packing flag `attn_uses_sequence_id` among the causes)."""
    return any(part in NO_WEIGHTS for part in diff.split(":", 1)[0].split("."))


def weight_mismatch_error(
    err: WeightMismatch, *, start: StartPoint, diffs: list[str], strict: bool
) -> ConfigError:
    """The user error for a checkpoint whose weights do not fit the model: the model config's differences
    from the checkpoint's manifest first, then the tensors; `checkpoint.load_strict=false` is offered only
    when it can help (whole tensors missing or extra, e.g. other layer counts; never another shape)."""
    where = (
        f"checkpoint.load_path={redact(start.info.url)}"
        if start.source == "load_path"
        else redact(start.info.url)
    )
    saved = f"was saved from another model config ({'; '.join(diffs)})" if diffs else "holds other weights"
    restore = (
        "set those model values to the checkpoint's" if diffs else "use the model config it was saved with"
    )
    if err.skippable and strict:
        fix = (
            f"{restore}, or pass checkpoint.load_strict=false to load the tensors both have and keep the "
            "others as initialised"
        )
    elif err.skippable:
        fix = restore
    else:
        fix = f"{restore} (tensors of another shape cannot load, even with checkpoint.load_strict=false)"
    return ConfigError(f"{where} {saved}: its weights do not fit this model ({err.detail}); {fix}")


def _load_base(
    model: nn.Module, start: StartPoint, *, cfg: CheckpointConfig, cache_root: str, local_rank: int
) -> None:
    """The frozen base under an adapters-only checkpoint: `load_path`'s weights (when resuming), or the
    pretrained weights an `hf-causal-lm` model was built with; anything else is refused (a random base)."""
    mc = start.info.manifest.model_config
    if start.source == "autoresume" and cfg.load_path:
        base = load_weights(
            model,
            cfg.load_path,
            strict=cfg.load_strict,
            allow_pickle=cfg.allow_pickle,
            cache_root=cache_root,
            local_rank=local_rank,
        )
        if base.manifest.adapters_only:
            raise ValueError(
                f"checkpoint.load_path={redact(cfg.load_path)} holds adapters only; "
                "point it at the base model"
            )
        return
    if mc.get("pretrained_model_name_or_path") and mc.get("pretrained", True):
        # the base was loaded with the model (hf-causal-lm pretrained weights)
        return
    raise ValueError(
        f"{redact(start.info.url)} holds LoRA adapters only (checkpoint.save_adapters_only=true) and nothing "
        "provides the base weights: set checkpoint.load_path to the base model's checkpoint (the one the "
        "adapters were trained on)"
    )


def load_weights(
    model: nn.Module,
    path: str,
    *,
    strict: bool = True,
    allow_pickle: bool = False,
    cache_root: str = layout.CHECKPOINT_CACHE,
    local_rank: int = 0,
    base_loaded: bool = False,
) -> CheckpointInfo:
    """Loads only the model weights of the checkpoint at `path` (directory or save folder, local or URL).

    `local_rank` (from the task's `DistContext`) picks the one process per node that downloads a remote one.
    An adapters-only checkpoint (`checkpoint.save_adapters_only`) loads only onto a model whose base is
    already loaded: `base_loaded`, or an `hf-causal-lm` model built with its pretrained weights.

    Returns:
        The checkpoint loaded (its manifest has the step and the model config).
    """
    info = open_checkpoint(path, scratch=cache_root)
    mc = info.manifest.model_config
    pretrained = bool(mc.get("pretrained_model_name_or_path")) and mc.get("pretrained", True)
    if info.manifest.adapters_only and not (base_loaded or pretrained):
        raise ValueError(
            f"{redact(info.url)} holds LoRA adapters only (checkpoint.save_adapters_only=true), without the "
            "base weights: export it merged with `scripts/export_hf.py --src <it> --base <base checkpoint>` "
            "and load that folder, "
            "or generate with `scripts/generate.py --model <it> --base <base checkpoint>`"
        )
    directory = fetch(info, cache_root=cache_root, weights_only=True, local_rank=local_rank)
    try:
        if info.manifest.format == "full":
            load_full(
                directory,
                model,
                None,
                strict=strict,
                allow_pickle=allow_pickle,
                rank=rank(),
                adapters_only=info.manifest.adapters_only,
            )
        else:
            load_sharded(
                directory,
                model,
                None,
                strict=strict,
                allow_pickle=allow_pickle,
                rank=rank(),
                saved_world=info.manifest.world_size,
            )
    except WeightMismatch as err:
        # one error line (task=eval, export), as when a run loads it
        start = StartPoint(info, "load_path", weights_only=True)
        raise weight_mismatch_error(err, start=start, diffs=[], strict=strict) from err
    return info
