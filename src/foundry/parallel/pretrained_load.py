"""Loading pretrained safetensors weights into a meta-device model, sharded or not, one tensor at a time.

Design note: llm-foundry's big-model finetuning builds the model on the meta device (`init_device: meta`,
or `mixed`) with `pretrained: true`, so that no rank ever holds the whole model. `build_hf_causal_lm` then
creates the architecture on meta and records the checkpoint's folder on the module (`mark_pretrained`);
whoever materialises the model (`build_model_on` in one process, `wrap_model` after `fully_shard`) calls
`materialize_or_load_`, which runs `load_pretrained_local_` instead of the random init. It lives in `parallel`
(the DTensor slices), so `foundry.models` never imports `torch.distributed`. It allocates the local tensors
(`to_empty`: only the shards under FSDP2), recomputes the non-persistent buffers (rotary `inv_freq`, MPT's
ALiBi/position tables) with the module's own `reset_buffers` or transformers' per-module `_init_weights`,
then fills every entry of `model.state_dict()` from the safetensors files: a sharded (DTensor) entry reads
only the slice this rank holds (`safe_open(...).get_slice`, offsets from the DTensor's mesh and
placements), a plain one the whole tensor. Tied weights (one tensor under two names) are read once, from
whichever name the checkpoint holds. No rank communicates: each reads the files itself, so the peak extra
memory is one tensor's local slice at a time (the file is memory-mapped once per tensor and unmapped after
it: a mapping kept for the whole load would count every page read in the RSS, up to the model's size). The
checkpoint's key names must be the model's `state_dict()` names (what `save_pretrained` of the same
transformers class writes); a missing or differently shaped tensor is an error naming it, keys the model does
not have are ignored (old `rotary_emb.inv_freq` entries).

Not thread-safe: one call per model, from the thread that owns it.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from foundry.parallel.meta_init import init_sharded_module_, materialize_local_, to_empty_keeping_ties_

__all__ = [
    "LoadReport",
    "load_pretrained_local_",
    "mark_pretrained",
    "peak_rss_bytes",
    "pretrained_folder",
    "reset_peak_rss",
    "resolve_weights_folder",
    "rss_bytes",
    "safetensors_files",
]

_ATTR = "_foundry_pretrained_folder"
_INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class LoadReport:
    """What `load_pretrained_local_` did on this rank."""

    tensors: int
    """State-dict entries filled from the checkpoint (tied names count once)."""
    bytes_read: int
    """Bytes of tensor data this rank read (its slices only when sharded)."""
    ignored_keys: int
    """Checkpoint keys the model has no entry for."""
    peak_rss_growth_mb: float
    """This process's peak resident memory during the load minus its resident memory before it (MiB)."""

    def line(self, *, rank: int) -> str:
        """One log line: `[foundry] pretrained load (rank r): ...`."""
        return (
            f"[foundry] pretrained load (rank {rank}): {self.tensors} tensors, "
            f"{self.bytes_read / 2**20:.1f} MiB read, peak RSS +{self.peak_rss_growth_mb:.1f} MiB"
        )


def mark_pretrained(model: nn.Module, folder: Path) -> None:
    """Records that meta-device `model` takes its weights from the safetensors in `folder`."""
    model.__dict__[_ATTR] = folder


def pretrained_folder(model: nn.Module) -> Path | None:
    """The folder `mark_pretrained` recorded on `model` (None: random init)."""
    folder = model.__dict__.get(_ATTR)
    return folder if isinstance(folder, Path) else None


def resolve_weights_folder(name: str, *, local_files_only: bool) -> Path:
    """The local folder holding `name`'s safetensors: `name` itself, or its hub snapshot (cache only unless
    `local_files_only` is false).

    Raises:
        ValueError: No safetensors weights found, naming `model.pretrained_model_name_or_path`.
    """
    folder = Path(name).expanduser()
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        try:
            folder = Path(
                snapshot_download(
                    name, local_files_only=local_files_only, allow_patterns=["*.safetensors", "*.json"]
                )
            )
        except Exception as err:
            # hub errors have many types; all mean "not available"
            raise ValueError(
                f"model.pretrained_model_name_or_path={name!r}: no local weights ({err}); pass a folder with "
                "*.safetensors, or set model.local_files_only=false to allow a hub download"
            ) from err
    # fail now, not after the model is sharded
    safetensors_files(folder, name=name)
    return folder


def safetensors_files(folder: Path, *, name: str | None = None) -> dict[str, Path]:
    """Checkpoint key -> the safetensors file holding it (`model.safetensors[.index.json]` in `folder`).

    Raises:
        ValueError: `folder` has no safetensors weights (e.g. only `pytorch_model.bin`).
    """
    index = folder / _INDEX
    if index.is_file():
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        return {key: folder / file for key, file in weight_map.items()}
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(
            f"model.pretrained_model_name_or_path={name or str(folder)!r}: {folder} has no *.safetensors "
            "weights, which model.init_device=meta with model.pretrained=true reads; convert the checkpoint "
            "(save_pretrained(..., safe_serialization=True)) or set model.init_device=cpu"
        )
    from safetensors import safe_open

    keys: dict[str, Path] = {}
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            keys.update(dict.fromkeys(handle.keys(), file))
    return keys


def rss_bytes() -> int:
    """This process's resident memory now (Linux `/proc/self/statm`; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def reset_peak_rss() -> None:
    """Restarts the peak-RSS count from the current RSS (Linux: `5` into `/proc/self/clear_refs`); elsewhere
    the peak stays the process's lifetime peak, so `peak_rss_bytes() - before` is an upper bound."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass


def peak_rss_bytes() -> int:
    """This process's peak resident memory since `reset_peak_rss` (or its start)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _local_index(tensor: torch.Tensor) -> tuple[slice, ...] | None:
    """The slice of the full tensor this rank holds (None: all of it); an empty slice when it holds none."""
    from torch.distributed.tensor import DTensor

    if not isinstance(tensor, DTensor):
        return None
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
    return tuple(slice(o, o + s) for o, s in zip(offset, shape, strict=True))


def _init_buffers(model: nn.Module) -> None:
    """Recomputes the non-persistent buffers (not in checkpoints) of every module that has one."""
    init = getattr(model, "_init_weights", None)
    persistent_names = set(model.state_dict(keep_vars=True))
    for prefix, module in model.named_modules():
        names = [f"{prefix}.{n}" if prefix else n for n, _ in module.named_buffers(recurse=False)]
        if all(n in persistent_names for n in names):
            continue
        reset = getattr(module, "reset_buffers", None)
        if callable(reset):
            reset()
        elif callable(init):
            # its parameters, if any, are overwritten from the checkpoint next
            init_sharded_module_(module, init)
        else:
            raise ValueError(
                f"{type(module).__name__} ({prefix}) has non-persistent buffers but neither reset_buffers "
                "nor a model `_init_weights` to recompute them; set model.init_device=cpu"
            )


def _entries(model: nn.Module) -> Iterator[tuple[list[str], torch.Tensor]]:
    """(names, tensor) per distinct state-dict tensor: tied weights give one entry with all their names."""
    by_id: dict[int, tuple[list[str], torch.Tensor]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        by_id.setdefault(id(tensor), ([], tensor))[0].append(name)
    yield from by_id.values()


def _read_into(tensor: torch.Tensor, file: Path, key: str) -> int:
    """Copies this rank's part of checkpoint tensor `key` into `tensor`; returns the bytes read.

    The file is mapped for this one tensor only: mapped pages count in the process's RSS while the mapping
    lives, so one mapping for the whole load would grow RSS by every slice read, up to the model's size."""
    from safetensors import safe_open

    with safe_open(str(file), framework="pt", device="cpu") as handle:
        part = handle.get_slice(key)
        if list(part.get_shape()) != list(tensor.shape):
            raise ValueError(
                f"{file.parent}: tensor {key!r} has shape {list(part.get_shape())} in the checkpoint but "
                f"{list(tensor.shape)} in the model; check model.config_overrides"
            )
        index = _local_index(tensor)
        local = tensor if index is None else tensor.to_local()  # type: ignore[attr-defined]
        if not local.numel():
            return 0
        value = part[index] if index is not None else part[:]
        local.copy_(value)
        return value.numel() * value.element_size()


@torch.no_grad()
def load_pretrained_local_(model: nn.Module, folder: Path, *, device: torch.device | str) -> LoadReport:
    """Allocates `model`'s meta tensors on `device` (only the local shards of `fully_shard`-ed ones) and
    fills them from the safetensors checkpoint in `folder`.

    Args:
        model: A meta-device transformers model, optionally already `fully_shard`-ed.
        folder: The checkpoint folder (`model.safetensors` or sharded files with their index).
        device: Where the local tensors go.

    Returns:
        What was read and this process's peak memory growth during the load.

    Raises:
        ValueError: A model tensor is missing from the checkpoint or has another shape, naming it.
    """
    reset_peak_rss()
    before = rss_bytes()
    keys = safetensors_files(folder)
    to_empty_keeping_ties_(model, device=device)
    _init_buffers(model)
    loaded: set[str] = set()
    count = read = 0
    for names, tensor in _entries(model):
        key = next((n for n in names if n in keys), None)
        if key is None:
            raise ValueError(
                f"{folder}: the checkpoint has no tensor {names[0]!r} (model.pretrained_model_name_or_path); "
                "its keys must be the model's state_dict names (save_pretrained of the same architecture)"
            )
        read += _read_into(tensor, keys[key], key)
        loaded.update(names)
        count += 1
    return LoadReport(
        tensors=count,
        bytes_read=read,
        ignored_keys=len(set(keys) - loaded),
        peak_rss_growth_mb=max(0, peak_rss_bytes() - before) / 2**20,
    )


def materialize_or_load_(model: nn.Module, *, device: torch.device | str) -> nn.Module:
    """Allocates `model`'s (possibly sharded) meta tensors on `device` and fills them: from the pretrained
    checkpoint `mark_pretrained` recorded on it (printing what each rank read and its peak memory growth),
    else with the model's own init (`materialize_local_`)."""
    folder = pretrained_folder(model)
    if folder is None:
        return materialize_local_(model, device=device)
    report = load_pretrained_local_(model, folder, device=device)
    print(report.line(rank=_rank()), flush=True)
    return model


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
