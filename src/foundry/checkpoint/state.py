"""Writing and reading checkpoint contents: model and optimizer (full or sharded), run state, per-rank RNG.

Design note: model and optimizer go through `torch.distributed.checkpoint.state_dict`, which names tensors
by their unwrapped module path, so a checkpoint written under DDP, FSDP2 or one process loads under any of
them; the sharded format is plain `torch.distributed.checkpoint`, which reshards on load (N ranks -> M).
Every file is read with `torch.load(weights_only=True)` unless the user opts into pickle: our own run state
is kept to tensors, numbers, strings and containers so that the safe loader takes it; DCP's own pickled
`.metadata` goes through the allowlist unpickler of `foundry.checkpoint.safe_dcp`.
"""

from __future__ import annotations

import glob
import os
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from foundry.checkpoint import safe_dcp
from foundry.checkpoint.adapters import match_keys
from foundry.checkpoint.safe_dcp import storage_reader
from foundry.serialization import load_file

__all__ = [
    "MODEL_FILE",
    "STATE_FILE",
    "COMMON_FILE",
    "WeightMismatch",
    "collect",
    "load_file",
    "load_full",
    "load_sharded",
    "read_state_file",
    "save_full",
    "save_sharded",
    "snapshot",
]

MODEL_FILE = "model.pt"
STATE_FILE = "state.pt"
COMMON_FILE = "common.pt"


def rank_file(rank: int) -> str:
    """The per-rank state file of a sharded checkpoint."""
    return f"rank{rank}.pt"


def collect(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, *, full: bool, trainable_only: bool = False
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Model and optimizer state dicts, keyed by unwrapped parameter names.

    Args:
        model: The (possibly DDP/FSDP-wrapped) model.
        optimizer: Its optimizer, or None for weights only.
        full: Gather full tensors to CPU (rank 0 gets them under FSDP); otherwise local shards.
        trainable_only: Leave out frozen parameters (and buffers): a LoRA model's adapters only, never
            gathered with the base.
    """
    options = StateDictOptions(full_state_dict=full, cpu_offload=full, ignore_frozen_params=trainable_only)
    if optimizer is None:
        return get_model_state_dict(model, options=options), None
    return get_state_dict(model, optimizer, options=options)


def snapshot(tree: Any) -> Any:
    """A deep copy of `tree` (nested containers) with every tensor cloned to CPU (so training may go on
    while a thread writes it)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().to("cpu", copy=True)
    if isinstance(tree, dict):
        return type(tree)((k, snapshot(v)) for k, v in tree.items())
    if isinstance(tree, list | tuple):
        return type(tree)(snapshot(v) for v in tree)
    return tree


def save_full(
    directory: str,
    *,
    model_sd: dict[str, Any],
    optim_sd: dict[str, Any] | None,
    run_state: dict[str, Any] | None,
    rngs: list[Any] | None,
) -> list[str]:
    """Writes `model.pt` (weights) and, unless weights only, `state.pt`; returns the file names."""
    os.makedirs(directory, exist_ok=True)
    torch.save(model_sd, os.path.join(directory, MODEL_FILE))
    if optim_sd is None:
        return [MODEL_FILE]
    torch.save({"optimizer": optim_sd, "run": run_state, "rng": rngs}, os.path.join(directory, STATE_FILE))
    return [MODEL_FILE, STATE_FILE]


def save_sharded(
    directory: str,
    *,
    model_sd: dict[str, Any],
    optim_sd: dict[str, Any] | None,
    run_state: dict[str, Any] | None,
    rng: Any,
    rank: int,
) -> list[str]:
    """`torch.distributed.checkpoint` of model (+ optimizer), plus this rank's RNG and rank 0's run state.

    Every rank calls it (it is a collective under a process group). Returns the files *this rank* wrote.
    """
    os.makedirs(directory, exist_ok=True)
    state = {"model": model_sd} if optim_sd is None else {"model": model_sd, "optim": optim_sd}
    dcp.save(state, storage_writer=dcp.FileSystemWriter(directory, single_file_per_rank=True))
    mine = sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, f"__{rank}_*.distcp")))
    if rank == 0:
        mine.append(".metadata")
    if optim_sd is not None:
        torch.save({"rng": rng}, os.path.join(directory, rank_file(rank)))
        mine.append(rank_file(rank))
        if rank == 0:
            torch.save({"run": run_state}, os.path.join(directory, COMMON_FILE))
            mine.append(COMMON_FILE)
    return mine


def _short(names: list[str]) -> str:
    return f"{names[:8]}{' ...' if len(names) > 8 else ''}"


class WeightMismatch(RuntimeError):
    """The checkpoint's weights do not fit the model
    (`foundry.checkpoint.resume` names the config differences).

    Args:
        missing: Model weights the checkpoint has no tensor for.
        unexpected: Stored tensors no model weight takes.
        shapes: `name: checkpoint (64, 32), model (64, 64)` for tensors stored with another shape.
    """

    def __init__(self, *, missing: list[str], unexpected: list[str], shapes: list[str]) -> None:
        self.missing, self.unexpected, self.shapes = missing, unexpected, shapes
        super().__init__(
            "the checkpoint's weights do not match the model: "
            + self.detail
            + "; check model config"
            + (
                ""
                if shapes
                else ", or load with checkpoint.load_strict=false to load the matching tensors only"
            )
        )

    @property
    def detail(self) -> str:
        """What differs: missing, unexpected and reshaped tensors (the first 8 of each)."""
        parts = [f"missing from the checkpoint: {_short(self.missing)}"] if self.missing else []
        parts += [f"not in the model: {_short(self.unexpected)}"] if self.unexpected else []
        if self.shapes:
            parts.append(f"{len(self.shapes)} tensor(s) of another shape, e.g. {'; '.join(self.shapes[:2])}")
        return "; ".join(parts)

    @property
    def skippable(self) -> bool:
        """A non-strict load helps: only whole tensors are missing or extra, none has another shape."""
        return not self.shapes


def _matched(
    model: nn.Module, stored: dict[str, tuple[int, ...] | None], *, strict: bool, adapters_only: bool
) -> tuple[dict[str, str], bool]:
    """Model weight name -> stored name (LoRA renames included, `foundry.checkpoint.adapters`).

    Args:
        stored: The checkpoint's tensor names and shapes (None: not known, not compared).

    Raises:
        WeightMismatch: A paired tensor has another shape (strict or not), or, when `strict`, a model weight
            has no stored tensor that must have one or a stored tensor fits no weight.

    Returns:
        The pairing and whether some weights stay unloaded by design.
    """
    model_sd = get_model_state_dict(model)
    match = match_keys(model_sd, stored, adapters_only=adapters_only)
    # a DTensor's shape here is the global one
    own = {k: tuple(v.shape) for k, v in model_sd.items() if isinstance(v, torch.Tensor)}
    shapes = [
        f"{key}: checkpoint {saved}, model {own[key]}"
        for key, name in match.source.items()
        if (saved := stored[name]) is not None and key in own and tuple(saved) != own[key]
    ]
    if shapes or (strict and (match.missing or match.unexpected)):
        raise WeightMismatch(
            missing=match.missing if strict else [],
            unexpected=match.unexpected if strict else [],
            shapes=shapes,
        )
    return match.source, bool(match.skipped)


# `meta`: a DCP storage metadata entry
def _stored_shape(meta: Any) -> tuple[int, ...] | None:
    size = getattr(meta, "size", None)
    return tuple(size) if size is not None else None


def _has_array_state(optim_sd: dict[str, Any]) -> bool:
    """Whether an optimizer state dict holds a per-parameter tensor with a dimension
    (moments, not only steps)."""
    per_param = optim_sd.get("state", {}).values()
    return any(isinstance(v, torch.Tensor) and v.dim() > 0 for s in per_param for v in s.values())


def _load_full_optimizer(
    model: nn.Module, optimizer: torch.optim.Optimizer, optim_sd: dict[str, Any]
) -> None:
    """Loads a full (unsharded) optimizer state dict into `optimizer`, resharding it to the model's layout.

    torch's full-state loader learns the device to distribute tensors to from the optimizer's own array state
    and fails ("Expected device to be set") when it has none: an optimizer that keeps no per-parameter
    tensors (SGD without momentum). A saved state without arrays has nothing to distribute (param groups and
    scalars are the same on every rank), so it loads as a local state dict, which needs no device.
    """
    if not _has_array_state(optim_sd):
        set_optimizer_state_dict(model, optimizer, optim_sd, options=StateDictOptions(full_state_dict=False))
        return
    try:
        set_optimizer_state_dict(model, optimizer, optim_sd, options=StateDictOptions(full_state_dict=True))
    except AssertionError as err:
        if "Expected device to be set" not in str(err):
            raise
        raise ValueError(
            "the checkpoint's optimizer state holds per-parameter tensors but this "
            f"{type(optimizer).__name__} keeps none (was the optimizer or its momentum changed?): restore "
            "the optimizer config, or start from the weights only (checkpoint.load_path + "
            "checkpoint.load_weights_only=true)"
        ) from err


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"


def read_state_file(path: str, *, allow_pickle: bool, keys: tuple[str, ...] = ()) -> Any:
    """`load_file(path)` of a checkpoint file, any failure of a damaged or crafted one as one `ValueError`
    naming it; with `keys`, the content must be a dict holding them.

    Raises:
        ValueError: Unreadable (truncated, corrupt zip, a pickle torch refuses), or not the expected dict.
    """
    try:
        obj = load_file(path, allow_pickle=allow_pickle)
    except (FileNotFoundError, MemoryError):
        raise
    except Exception as err:
        # torch.load raises whatever the damaged bytes lead it to
        if isinstance(err, ValueError) and str(err).startswith(path):
            # load_file's own refusal of a pickle, naming the file
            raise
        raise ValueError(f"{path}: not a readable checkpoint file ({_one_line(err)})") from None
    if keys and not (isinstance(obj, dict) and all(k in obj for k in keys)):
        raise ValueError(
            f"{path}: not a checkpoint file of this library (expected an object with {', '.join(keys)}; "
            f"got {type(obj).__name__}"
            f"{f' with keys {sorted(map(str, obj))[:8]}' if isinstance(obj, dict) else ''})"
        )
    return obj


def _weights(obj: Any, path: str) -> dict[str, Any]:
    """`obj` if it is a dict keyed by names (what `model.pt` holds; its values are checked once matched)."""
    if not isinstance(obj, dict) or not all(isinstance(k, str) for k in obj):
        raise ValueError(f"{path}: not model weights (an object of name -> tensor, got {type(obj).__name__})")
    return obj


class _Restoring:
    """Turns an error raised while a checkpoint's values are applied (a value of the wrong type or shape that
    torch's loaders trip over) into one `ValueError` naming the file."""

    def __init__(self, path: str, what: str) -> None:
        self.path, self.what = path, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        if err is None or isinstance(err, ValueError | WeightMismatch) or not isinstance(err, Exception):
            return
        if isinstance(
            err, KeyError | TypeError | AttributeError | IndexError | RuntimeError | AssertionError
        ):
            raise ValueError(f"{self.path}: its {self.what} cannot be restored ({_one_line(err)})") from None


def load_full(
    directory: str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    *,
    strict: bool,
    allow_pickle: bool,
    rank: int,
    adapters_only: bool = False,
) -> dict[str, Any] | None:
    """Loads `model.pt` (and `state.pt` when `optimizer` is given).

    A plain checkpoint loads into a model with LoRA adapters (base weights by their plain names, adapters
    keep their init); an `adapters_only` one loads the adapters and leaves the base as it is.

    Returns:
        None for weights only, else `{"run": run state, "rng": this rank's RNG state}` (rank 0's when the
        checkpoint was saved by fewer ranks).
    """
    model_path = os.path.join(directory, MODEL_FILE)
    weights = _weights(read_state_file(model_path, allow_pickle=allow_pickle), model_path)
    shapes = {k: tuple(v.shape) if isinstance(v, torch.Tensor) else None for k, v in weights.items()}
    source, partial = _matched(model, shapes, strict=strict, adapters_only=adapters_only)
    weights = {key: weights[name] for key, name in source.items()}
    bad = [source[key] for key, value in weights.items() if not isinstance(value, torch.Tensor)]
    if bad:
        raise ValueError(f"{model_path}: not model weights: {bad[0]!r:.80} is not a tensor")
    options = StateDictOptions(full_state_dict=True, strict=strict and not partial)
    with _Restoring(model_path, "weights"):
        set_model_state_dict(model, weights, options=options)
    if optimizer is None:
        return None
    state_path = os.path.join(directory, STATE_FILE)
    state = read_state_file(state_path, allow_pickle=allow_pickle, keys=("optimizer", "run", "rng"))
    if not isinstance(state["optimizer"], dict) or not isinstance(state["rng"], list | None):
        raise ValueError(
            f"{state_path}: not a checkpoint file of this library (optimizer or rng of the wrong type)"
        )
    with _Restoring(state_path, "optimizer state"):
        _load_full_optimizer(model, optimizer, state["optimizer"])
    rngs = state["rng"] or [None]
    return {"run": state["run"], "rng": rngs[rank] if rank < len(rngs) else rngs[0]}


def load_sharded(
    directory: str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    *,
    strict: bool,
    allow_pickle: bool,
    rank: int,
    saved_world: int,
    adapters_only: bool = False,
) -> dict[str, Any] | None:
    """Loads a `torch.distributed.checkpoint` directory into the (possibly differently sharded) model.

    Unless `allow_pickle`, its `.metadata` is unpickled through an allowlist of the DCP metadata classes and
    non-tensor values are read weights-only (`foundry.checkpoint.safe_dcp`): a crafted file is refused.
    LoRA renames and `adapters_only` as in `load_full`.
    """
    model_sd, optim_sd = collect(model, optimizer, full=False)
    stored = storage_reader(directory, allow_pickle=allow_pickle).read_metadata().state_dict_metadata
    names = {k[len("model.") :]: _stored_shape(v) for k, v in stored.items() if k.startswith("model.")}
    source, partial = _matched(model, names, strict=strict, adapters_only=adapters_only)
    # stored name -> the model tensor DCP loads it into (in place)
    view: dict[str, Any] = {}
    for key, name in source.items():
        view.setdefault(name, model_sd[key])
    state = {"model": view} if optim_sd is None else {"model": view, "optim": optim_sd}
    safe_dcp.load(state, directory, allow_pickle=allow_pickle, allow_partial_load=not strict)
    # a stored tensor may feed two weights
    loaded = {key: view[name] for key, name in source.items()}
    with _Restoring(directory, "weights"):
        set_model_state_dict(model, loaded, options=StateDictOptions(strict=strict and not partial))
    if optimizer is None:
        return None
    with _Restoring(directory, "optimizer state"):
        set_optimizer_state_dict(model, optimizer, state["optim"])
    own = rank_file(rank if rank < saved_world else 0)
    rng = read_state_file(os.path.join(directory, own), allow_pickle=allow_pickle, keys=("rng",))["rng"]
    run = read_state_file(os.path.join(directory, COMMON_FILE), allow_pickle=allow_pickle, keys=("run",))[
        "run"
    ]
    return {"run": run, "rng": rng}
