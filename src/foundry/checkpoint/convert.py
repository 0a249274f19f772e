"""Checkpoint conversions: sharded <-> full, and either to a Hugging Face folder, with bounded memory.

Design note: tensors never all sit in RAM at once. Sharded -> full loads every tensor into a file-backed
(`torch.from_file`, shared mmap) buffer, so the OS pages them out as needed, and `torch.save` streams them
into the output; full -> sharded and -> HF read the full files with `torch.load(mmap=True)`. The result is a
normal checkpoint: its own directory with a manifest (sizes and sha256), published last.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._nested_dict import unflatten_state_dict
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from foundry.checkpoint import safe_dcp
from foundry.checkpoint.layout import HASH, MANIFEST, CheckpointInfo, Manifest, open_checkpoint
from foundry.checkpoint.resume import fetch, load_weights
from foundry.checkpoint.safe_dcp import storage_reader
from foundry.checkpoint.state import COMMON_FILE, MODEL_FILE, STATE_FILE, load_file, load_full, rank_file
from foundry.checkpoint.store import CheckpointStore
from streaming.format.hashing import hash_file

if TYPE_CHECKING:
    from foundry.models.mpt import MPTForCausalLM

__all__ = ["convert_checkpoint", "load_model", "publish_checkpoint", "read_sharded", "to_hf"]


def _mmap_tensor(directory: str, index: int, meta: TensorStorageMetadata) -> torch.Tensor:
    numel = 1
    for d in meta.size:
        numel *= d
    path = os.path.join(directory, f"{index}.bin")
    return torch.from_file(path, shared=True, size=max(numel, 1), dtype=meta.properties.dtype)[:numel].view(
        meta.size
    )


def read_sharded(
    directory: str, *, scratch: str, prefix: str | None = None, allow_pickle: bool = False
) -> dict[str, Any]:
    """A sharded checkpoint's nested state (`{"model": ..., "optim": ...}`) in file-backed tensors.

    Args:
        directory: The torch.distributed.checkpoint directory.
        scratch: Where the file-backed buffers go (as large as the tensors read).
        prefix: Read only the keys under this top-level key (e.g. `model`).
        allow_pickle: Unpickle `.metadata` and non-tensor values without the allowlist (trusted files only).
    """
    reader = storage_reader(directory, allow_pickle=allow_pickle)
    metadata = reader.read_metadata()
    flat: dict[str, Any] = {}
    for i, (key, meta) in enumerate(metadata.state_dict_metadata.items()):
        if prefix is not None and not key.startswith(prefix + "."):
            continue
        flat[key] = _mmap_tensor(scratch, i, meta) if isinstance(meta, TensorStorageMetadata) else None
    safe_dcp.load(flat, directory, allow_pickle=allow_pickle, flatten_state_dict=False)
    mapping = {k: v for k, v in (metadata.planner_data or {}).items() if k in flat}
    return unflatten_state_dict(flat, mapping)


def publish_checkpoint(staging: str, dst: str, manifest: Manifest) -> str:
    """Hashes the staged files, publishes them and then the manifest to `dst` (local dir or URL)."""
    files = {}
    for name in sorted(os.listdir(staging)):
        path = os.path.join(staging, name)
        files[name] = {"bytes": os.path.getsize(path), HASH: hash_file(HASH, path)}
    parent, _, name = dst.rstrip("/").rpartition("/")
    store = CheckpointStore(parent or ".")
    for rel in files:
        store.put(os.path.join(staging, rel), f"{name}/{rel}")
    store.put_text(
        replace(manifest, files=files).to_json(), f"{name}/{MANIFEST}", scratch=staging + "-scratch"
    )
    shutil.rmtree(staging + "-scratch", ignore_errors=True)
    return store.url(name)


def _sharded_to_full(
    src: str, staging: str, info: CheckpointInfo, scratch: str, *, allow_pickle: bool
) -> Manifest:
    prefix = "model" if info.manifest.weights_only else None
    state = read_sharded(src, scratch=scratch, prefix=prefix, allow_pickle=allow_pickle)
    torch.save(state["model"], os.path.join(staging, MODEL_FILE))
    if not info.manifest.weights_only:
        run = load_file(os.path.join(src, COMMON_FILE), allow_pickle=allow_pickle)["run"]
        rngs = [
            load_file(os.path.join(src, rank_file(r)), allow_pickle=allow_pickle)["rng"]
            for r in range(info.manifest.world_size)
            if os.path.exists(os.path.join(src, rank_file(r)))
        ]
        torch.save({"optimizer": state["optim"], "run": run, "rng": rngs}, os.path.join(staging, STATE_FILE))
    return replace(info.manifest, format="full")


def _full_to_sharded(src: str, staging: str, info: CheckpointInfo) -> Manifest:
    model = load_file(os.path.join(src, MODEL_FILE), allow_pickle=False, opt_in=None, mmap=True)
    if info.manifest.weights_only:
        dcp.save({"model": model}, storage_writer=dcp.FileSystemWriter(staging, single_file_per_rank=True))
        return replace(info.manifest, format="sharded")
    state = load_file(os.path.join(src, STATE_FILE), allow_pickle=False, opt_in=None, mmap=True)
    dcp.save(
        {"model": model, "optim": state["optimizer"]},
        storage_writer=dcp.FileSystemWriter(staging, single_file_per_rank=True),
    )
    torch.save({"run": state["run"]}, os.path.join(staging, COMMON_FILE))
    rngs = state["rng"] or []
    for r, rng in enumerate(rngs):
        torch.save({"rng": rng}, os.path.join(staging, rank_file(r)))
    return replace(info.manifest, format="sharded", world_size=max(len(rngs), 1))


def convert_checkpoint(
    src: str, dst: str, *, to: str, work_dir: str | None = None, allow_pickle: bool = False
) -> str:
    """Writes checkpoint `src` (directory or save folder, local or URL) in format `to` as `dst`.

    File names in its manifest are checked (`streaming.util.safepath`) before anything is downloaded, and a
    sharded source is read without arbitrary unpickling unless `allow_pickle` (trusted files only).

    Returns:
        Where the converted checkpoint is (`dst`).
    """
    if to not in ("full", "sharded"):
        raise ValueError(f"to={to!r}: choose full or sharded (use to_hf for a Hugging Face folder)")
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="convert-") as tmp:
        info = open_checkpoint(src, scratch=tmp)
        if info.manifest.format == to:
            raise ValueError(f"{src} is already {to}")
        local = fetch(info, cache_root=os.path.join(tmp, "download"))
        staging = os.path.join(tmp, "out")
        os.makedirs(staging)
        if to == "full":
            scratch = os.path.join(tmp, "tensors")
            os.makedirs(scratch)
            manifest = _sharded_to_full(local, staging, info, scratch, allow_pickle=allow_pickle)
        else:
            manifest = _full_to_sharded(local, staging, info)
        return publish_checkpoint(staging, dst, manifest)


def load_model(
    src: str, *, device: str = "cpu", base: str | None = None, allow_pickle: bool = False
) -> tuple[Any, Manifest]:
    """The model of trainer checkpoint `src` (directory or save folder, local or URL), built from its
    manifest's model config (LoRA adapters included when it was trained with them) with the saved weights.

    Args:
        base: For an adapters-only checkpoint (`checkpoint.save_adapters_only`): the trainer checkpoint of
            the base model (not needed when the base is an `hf-causal-lm` model's pretrained weights).

    Returns:
        `(model, manifest)`; the model is on `device` in eval mode.
    """
    # local: `import foundry.checkpoint` stays free of transformers (which `foundry.models` loads)
    from foundry.models import build_model_on, model_schema_from_dict

    with tempfile.TemporaryDirectory(prefix="load-model-") as tmp:
        info = open_checkpoint(src, scratch=tmp)
        if not info.manifest.model_config:
            raise ValueError(
                f"{src}: the manifest records no model config; export it with scripts/export_hf.py"
            )
        schema = model_schema_from_dict(info.manifest.model_config)
        local = fetch(info, cache_root=os.path.join(tmp, "download"), weights_only=True)
        if info.manifest.adapters_only:
            scratch = os.path.join(tmp, "base")
            return _adapters_on_base(
                schema, info, local, base=base, scratch=scratch, device=device, allow_pickle=allow_pickle
            )
        if info.manifest.format == "full":
            weights = load_file(os.path.join(local, MODEL_FILE), allow_pickle=False, opt_in=None, mmap=True)
        else:
            scratch = os.path.join(tmp, "tensors")
            os.makedirs(scratch)
            weights = read_sharded(local, scratch=scratch, prefix="model", allow_pickle=allow_pickle)["model"]
        # the (memory-mapped) tensors are assigned; a mapping outlives the removal of its file on POSIX
        model = build_model_on(schema, device=device, state_dict=weights)
        return model.eval(), info.manifest


def _adapters_on_base(
    # a foundry.models ModelConfig
    schema: Any,
    info: CheckpointInfo,
    local: str,
    *,
    base: str | None,
    scratch: str,
    device: str,
    allow_pickle: bool,
) -> tuple[Any, Manifest]:
    """An adapters-only checkpoint on its base: `base`'s weights (or the pretrained ones),
    then the adapters."""
    from foundry.models import build_model_on

    mc = info.manifest.model_config
    pretrained = bool(mc.get("pretrained_model_name_or_path")) and mc.get("pretrained", True)
    if base is None and not pretrained:
        raise ValueError(
            f"{info.url} holds LoRA adapters only (checkpoint.save_adapters_only=true): pass the base "
            "model's checkpoint too (base=..., scripts/generate.py --base, scripts/export_hf.py --base)"
        )
    model = build_model_on(schema, device="cpu")
    if base is not None:
        load_weights(model, base, allow_pickle=allow_pickle, cache_root=scratch)
    load_full(local, model, None, strict=True, allow_pickle=allow_pickle, rank=0, adapters_only=True)
    # (load_full directly: `local` is already fetched and the base is loaded above)
    return model.to(device).eval(), info.manifest


def to_hf(
    src: str,
    out_dir: str,
    *,
    tokenizer: Any = None,
    fmt: str = "auto",
    dtype: torch.dtype = torch.float32,
    base: str | None = None,
    allow_pickle: bool = False,
) -> str:
    """Exports the model of checkpoint `src` to a Hugging Face folder (see `foundry.models.export.export_hf`).

    A model trained with LoRA adapters is merged first: the folder holds a plain model of the base
    architecture (same logits as base + adapter); an adapters-only checkpoint needs its `base` (see
    `load_model`).

    Returns:
        The HF format written (`hf_mpt` or `foundry`).
    """
    # local: `import foundry.checkpoint` stays free of transformers (which `foundry.models` loads)
    from foundry.models.export import export_hf

    model, _ = load_model(src, base=base, allow_pickle=allow_pickle)
    # export_hf is annotated for our MPT; with fmt=foundry it also saves a transformers causal LM
    return export_hf(cast("MPTForCausalLM", model), out_dir, tokenizer=tokenizer, fmt=fmt, dtype=dtype)
