"""Reading a Composer checkpoint (one `.pt` file, or Composer's sharded torch.distributed.checkpoint folder).

Design note: both forms are read without running code from them. A `.pt` (or a `.tar` holding
`composer_states.pt`, or a `.pt.zst`/`.pt.lz4`: `foundry.compat.composer.compressed`) goes through the
allow-list unpickler of `foundry.compat.composer.unpickle`; a sharded folder's pickled `.metadata` through
`foundry.checkpoint.safe_dcp`'s allow-list and its non-tensor values (`BYTE_IO`: timestamps with `timedelta`,
RNG tuples, param groups) through the same unpickler as the `.pt`. Only what a run continues from is read from
a sharded folder (Composer also stores its tokenizer there as ~100k single values). What comes out is
`ComposerCheckpoint`: plain tensors and numbers under our names (`foundry.compat.composer.mapping`), which
`foundry.compat.composer.convert` writes as one of our checkpoints.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._nested_dict import unflatten_state_dict
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.planner import ReadItem

from foundry.checkpoint.safe_dcp import RestrictedReader, UnsafeCheckpointError
from foundry.compat.composer.compressed import COMPOSER_SUFFIXES, compression_of
from foundry.compat.composer.mapping import (
    map_model,
    map_optimizer,
    map_rng,
    map_scheduler,
    map_timestamp,
    mpt_model_config,
)
from foundry.compat.composer.unpickle import is_torch_zip, load_pt, load_torch_bytes
from streaming.util.safepath import UnsafePathError

__all__ = ["ComposerCheckpoint", "is_composer_checkpoint", "read_composer_checkpoint"]

_DCP_METADATA = ".metadata"
_MANIFEST = "manifest.json"
_MPT_CLASS = "MPTForCausalLM"


@dataclass
class ComposerCheckpoint:
    """A Composer checkpoint as plain data under our names (see `foundry.compat.composer.mapping`)."""

    source: str
    model: dict[str, torch.Tensor]
    """Weights by our parameter names."""
    model_config: dict[str, Any]
    """Our `model` fields for an llm-foundry MPT (empty for other models: the run's config decides)."""
    weights_only: bool
    """Only the weights were read (asked for, or all the file holds)."""
    optimizer: dict[str, Any] | None = None
    """Name-keyed optimizer state dict (`{"state", "param_groups"}`), as `get_state_dict` gives ours."""
    optimizer_name: str | None = None
    scheduler: dict[str, Any] | None = None
    """`LambdaLR` state at our schedule position (Composer's minus one step)."""
    counters: dict[str, int] = field(default_factory=dict)
    """`TrainState` counters: step, epoch, step_in_epoch, samples, tokens."""
    dataset_state: dict[str, Any] | None = None
    """The train dataset's mosaicml-streaming state dict."""
    rng: list[dict[str, Any]] | None = None
    """Per-rank RNG state in `foundry.rng` format."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Composer's `state.metadata` (versions, world size, batch sizes, precision)."""

    @property
    def global_batch_size(self) -> int | None:
        """Samples per optimizer step: from the timestamp, else per-device batch x world size."""
        step, samples = self.counters.get("step", 0), self.counters.get("samples", 0)
        if step and samples and samples % step == 0:
            return samples // step
        per_device, world = self.metadata.get("train_dataloader_batch_size"), self.metadata.get("world_size")
        return per_device * world if isinstance(per_device, int) and isinstance(world, int) else None

    def run_state(self) -> dict[str, Any]:
        """What `Trainer.load_run_state` takes: scheduler, counters, data position
        (no grad scaler: fp32/bf16)."""
        return {
            "scheduler": self.scheduler,
            "scaler": None,
            "state": dict(self.counters),
            "dataloader": self.dataset_state,
        }


def is_composer_checkpoint(path: str) -> bool:
    """Whether `path` is a Composer checkpoint: locally by its content (a file in torch's zip format, zstd or
    lz4 frames around one, a tar with `composer_states.pt`, or a torch.distributed.checkpoint folder without
    our `manifest.json`); a URL by its name (`.pt`, `.pt.zst`, `.pt.lz4`, `.tar`: our checkpoints are
    folders)."""
    if "://" in path:
        return path.endswith(COMPOSER_SUFFIXES)
    if os.path.isfile(path):
        with open(path, "rb") as f:
            head = f.read(262)
        return is_torch_zip(head) or compression_of(head) is not None or head[257:262] == b"ustar"
    return (
        os.path.isdir(path)
        and os.path.isfile(os.path.join(path, _DCP_METADATA))
        and not os.path.exists(os.path.join(path, _MANIFEST))
    )


def read_composer_checkpoint(path: str, *, weights_only: bool = False) -> ComposerCheckpoint:
    """Reads the Composer checkpoint at local `path` (file or sharded folder) without running its code.

    Args:
        weights_only: Read the weights (and model config) only.

    Raises:
        UnsafeCheckpointError: The file names a global outside the allow-list (names it and the global).
        ValueError: Not a Composer checkpoint, or one whose model or state cannot continue here.
    """
    if os.path.isdir(path):
        obj = _read_sharded(path, weights_only=weights_only)
    else:
        obj = load_pt(path)
    return _from_state(obj, source=path, weights_only=weights_only)


def _dig(obj: Any, *keys: str) -> dict[str, Any]:
    """`obj[k1][k2]...` when each step is a dict, else `{}` (a crafted file may put anything anywhere)."""
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, dict) else {}


def _from_state(obj: Any, *, source: str, weights_only: bool) -> ComposerCheckpoint:
    state = obj.get("state") if isinstance(obj, dict) else None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise ValueError(f"{source}: not a Composer checkpoint (no state.model)")
    model = map_model(state["model"])
    if not model:
        raise ValueError(f"{source}: state.model holds no tensors")
    hf = _dig(state, "integrations", "huggingface", "model", "config")
    model_config: dict[str, Any] = {}
    if str(hf.get("class", "")).endswith(_MPT_CLASS) and isinstance(hf.get("content"), dict):
        try:
            model_config = mpt_model_config(hf["content"])
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None
        except (KeyError, TypeError, AttributeError) as err:
            # a value of the wrong type in its config
            raise ValueError(
                f"{source}: state.integrations.huggingface.model.config.content is not an MPT config "
                f"({type(err).__name__}: {err})"
            ) from None
    metadata: dict[str, Any] = state["metadata"] if isinstance(state.get("metadata"), dict) else {}
    out = ComposerCheckpoint(
        source=source, model=model, model_config=model_config, weights_only=True, metadata=dict(metadata)
    )
    try:
        # a weights-only Composer file has none
        if state.get("timestamp") is not None:
            out.counters = map_timestamp(state["timestamp"])
        if weights_only or "optimizers" not in state:
            return out
        out.optimizer_name, out.optimizer = map_optimizer(state["optimizers"], param_names=list(model))
        out.scheduler = map_scheduler(state.get("schedulers"))
        rng = obj.get("rng")
        out.rng = [map_rng(r) for r in rng] if isinstance(rng, list) and rng else None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        raise ValueError(f"{source}: cannot read its training state ({type(err).__name__}: {err})") from None
    train = _dig(state, "dataset_state").get("train")
    out.dataset_state = dict(train) if isinstance(train, dict) else None
    out.weights_only = False
    return out


# ------------------------------------------------------------------------------------------- sharded (DCP)
_WEIGHTS = (
    "state.model.",
    "state.integrations.huggingface.model.config.",
    "state.metadata.",
    "state.timestamp.",
)
_TRAINING = ("state.optimizers.", "state.schedulers.", "state.dataset_state.train.", "rng.")


class _ComposerPlanner(DefaultLoadPlanner):
    """Reads `BYTE_IO` values with the allow-list unpickler
    (Composer stores `timedelta`s, numpy arrays...)."""

    def __init__(self, *, source: str) -> None:
        super().__init__(flatten_state_dict=False)
        self.source = source

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        obj = load_torch_bytes(value, source=f"{self.source} ({fqn})")
        # (`flatten_sharded_tensors` copies the dict)
        self.state_dict[fqn] = self.original_state_dict[fqn] = obj


def _read_sharded(directory: str, *, weights_only: bool) -> dict[str, Any]:
    """The parts of Composer's sharded checkpoint a run continues from, as one nested (unsharded) dict."""
    reader = RestrictedReader(directory)
    metadata = reader.read_metadata()
    prefixes = _WEIGHTS if weights_only else _WEIGHTS + _TRAINING
    flat: dict[str, Any] = {}
    for key, meta in metadata.state_dict_metadata.items():
        if not key.startswith(prefixes):
            continue
        if isinstance(meta, TensorStorageMetadata):
            flat[key] = torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
        else:
            flat[key] = None
    if not any(k.startswith("state.model.") for k in flat):
        raise ValueError(
            f"{directory}: a torch.distributed.checkpoint folder without state.model: not Composer's"
        )
    try:
        dcp.load(flat, storage_reader=reader, planner=_ComposerPlanner(source=directory))
    except CheckpointException as e:
        for exc, _trace in e.failures.values():
            if isinstance(exc, UnsafeCheckpointError | UnsafePathError | ValueError):
                raise exc from None
        raise
    mapping = {k: v for k, v in (metadata.planner_data or {}).items() if k in flat}
    return unflatten_state_dict(flat, mapping)
