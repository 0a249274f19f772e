"""A Composer checkpoint written as one of ours (full format, with a manifest), so every loader here takes it.

Design note: rather than teach the resume path a second format, a Composer checkpoint is converted once into
our `full` layout (`model.pt`, `state.pt`, `manifest.json` with sizes and sha256, published last) and then
loaded like any checkpoint: `checkpoint.load_path=<composer file>` converts into the run's scratch folder
first (`composer_start`), `scripts/convert_checkpoint.py --from composer` into a folder of the user's choice.
The manifest records the model config read from the checkpoint (llm-foundry's `MPTConfig`), so a model that
does not fit is refused naming the differing fields, and `extra.composer` says where the state came from.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict
from typing import Any

import torch

from foundry.checkpoint.convert import publish_checkpoint
from foundry.checkpoint.layout import Manifest
from foundry.compat.composer.checkpoint import (
    ComposerCheckpoint,
    is_composer_checkpoint,
    read_composer_checkpoint,
)
from foundry.compat.composer.compressed import fetch_remote

__all__ = ["composer_start", "describe", "to_foundry"]

# foundry.checkpoint.state's names (full format)
MODEL_FILE, STATE_FILE = "model.pt", "state.pt"


def _full_model_config(ckpt: ComposerCheckpoint) -> dict[str, Any]:
    """Our complete `model` config (every field, as the trainer records it) for the checkpoint's MPT."""
    if not ckpt.model_config:
        return {}
    # local: imports transformers
    from foundry.models.registry import model_schema_from_dict

    try:
        return asdict(model_schema_from_dict(ckpt.model_config, hf=False))
    except Exception as err:
        # omegaconf's validation errors have several types
        raise ValueError(
            f"{ckpt.source}: its llm-foundry model config does not fit this MPT "
            f"({' '.join(str(err).split())})"
        ) from None


def _manifest(ckpt: ComposerCheckpoint) -> Manifest:
    c, meta = ckpt.counters, ckpt.metadata
    version = (meta.get("composer_env_info") or {}).get("composer_version")
    return Manifest(
        step=c.get("step", 0),
        epoch=c.get("epoch", 0),
        format="full",
        world_size=len(ckpt.rng) if ckpt.rng else int(meta.get("world_size") or 1),
        weights_only=ckpt.weights_only,
        files={},
        tokens=c.get("tokens", 0),
        samples=c.get("samples", 0),
        model_config=_full_model_config(ckpt),
        extra={
            "global_train_batch_size": ckpt.global_batch_size,
            "composer": {
                "source": ckpt.source,
                "composer_version": str(version) if version else None,
                "optimizer": ckpt.optimizer_name,
                "precision": meta.get("precision"),
            },
        },
    )


def describe(ckpt: ComposerCheckpoint) -> str:
    """One line: what was read (`step 10, epoch 0; model, DecoupledAdamW, scheduler, ...`)."""
    parts = (
        ["model"]
        if ckpt.weights_only
        else [
            "model",
            ckpt.optimizer_name or "optimizer",
            "scheduler" if ckpt.scheduler is not None else "no scheduler",
            "counters",
            "RNG" if ckpt.rng else "no RNG",
            "data position" if ckpt.dataset_state else "no data position",
        ]
    )
    return f"step {ckpt.counters.get('step', 0)}, epoch {ckpt.counters.get('epoch', 0)}; " + ", ".join(parts)


def to_foundry(
    src: str, dst: str, *, weights_only: bool = False, work_dir: str | None = None
) -> tuple[str, str]:
    """Converts the Composer checkpoint `src` (file or sharded folder, local or an object-store URL) into our
    full checkpoint `dst` (a local folder or URL), reading it without running code from it.

    Returns:
        `(where, what)`: the written checkpoint and a `describe` line.
    """
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="composer-") as tmp:
        local = fetch_remote(src, os.path.join(tmp, "download")) if "://" in src else src
        ckpt = read_composer_checkpoint(local, weights_only=weights_only)
        ckpt.source = src
        manifest = _manifest(ckpt)
        staging = os.path.join(tmp, "out")
        os.makedirs(staging)
        torch.save(ckpt.model, os.path.join(staging, MODEL_FILE))
        if not ckpt.weights_only:
            state = {"optimizer": ckpt.optimizer, "run": ckpt.run_state(), "rng": ckpt.rng}
            torch.save(state, os.path.join(staging, STATE_FILE))
        return publish_checkpoint(staging, dst, manifest), describe(ckpt)


def composer_start(path: str, *, scratch: str, weights_only: bool, rank: int = 0) -> str:
    """`checkpoint.load_path` pointing at a Composer checkpoint: converted into `scratch` (per rank, so ranks
    never write one folder together); returns our checkpoint's directory there."""
    ckpt_root = os.path.join(scratch, f"composer-rank{rank}")
    shutil.rmtree(ckpt_root, ignore_errors=True)
    os.makedirs(ckpt_root)
    where, what = to_foundry(
        path, os.path.join(ckpt_root, "start"), weights_only=weights_only, work_dir=ckpt_root
    )
    if rank == 0:
        print(
            f"[foundry] load_path: read the Composer checkpoint {path} ({what}) without running its code",
            flush=True,
        )
    return where


def as_foundry_start(path: str, *, scratch: str, weights_only: bool, rank: int) -> str:
    """`checkpoint.load_path` adapter (`foundry.checkpoint.LoadPathAdapter`): a Composer checkpoint (found by
    content: a torch file, or a DCP folder without our manifest) becomes one of ours in `scratch`; any other
    path comes back unchanged."""
    # llm-foundry's `latest-rank{rank}.pt`: rank 0 holds it all
    composer = path.replace("{rank}", "0")
    if not is_composer_checkpoint(composer):
        return path
    return composer_start(composer, scratch=scratch, weights_only=weights_only, rank=rank)
