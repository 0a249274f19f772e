"""Reading torch.distributed.checkpoint folders without running code from them.

`torch.distributed.checkpoint` reads its `.metadata` file with plain `pickle.load` and every non-tensor value
(`BYTE_IO` items: optimizer hyperparameters, ...) with `torch.load(weights_only=False)`: a crafted sharded
checkpoint runs arbitrary code on load, whatever `checkpoint.allow_pickle` says. This module is the safe
path, used unless the user opts into pickle:

- `RestrictedReader` (a `FileSystemReader`) unpickles `.metadata` with an allowlist of exactly the globals
  DCP metadata is made of (its dataclasses and enum, `torch.Size`, dtypes, layouts, pure paths), and checks
  every storage file name it lists with the path-safety rule (`streaming.util.safepath`);
- `SafeLoadPlanner` (a `DefaultLoadPlanner`) reads `BYTE_IO` values with `torch.load(weights_only=True)`.

Anything else is refused with an error naming the file and the refused global, before it is constructed.
"""

from __future__ import annotations

import io
import os
import pickle
import re
from typing import IO, Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.planner import ReadItem

from streaming.util.safepath import UnsafePathError, safe_relpath

__all__ = [
    "ALLOWED_GLOBALS",
    "RestrictedReader",
    "SafeLoadPlanner",
    "UnsafeCheckpointError",
    "load",
    "load_planner",
    "restricted_load",
    "storage_reader",
]

_TRUST_HINT = (
    "If you trust this checkpoint (it can run arbitrary code when loaded), set checkpoint.allow_pickle=true"
)

ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("torch.distributed.checkpoint.metadata", name)
        for name in (
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "Metadata",
            "MetadataIndex",
            "StorageMeta",
            "TensorProperties",
            "TensorStorageMetadata",
            "_MEM_FORMAT_ENCODING",
        )
    }
    | {
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),
        ("collections", "OrderedDict"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "slice"),
        ("_codecs", "encode"),
    }
    | {(module, cls) for module in ("pathlib", "pathlib._local") for cls in ("PosixPath", "PurePosixPath")}
    | {
        (module, cls)
        for module in ("pathlib", "pathlib._local")
        for cls in ("WindowsPath", "PureWindowsPath")
    }
)
"""`(module, name)` globals a DCP `.metadata` pickle may name (traced from real metadata of model + optimizer
checkpoints); torch dtypes (`torch.float32`, ...) are allowed besides."""


class UnsafeCheckpointError(pickle.UnpicklingError, ValueError):
    """A checkpoint file that names a global outside the allowlist (it could run code when loaded).

    A `ValueError` too, so `train.py` reports it as one `error:` line and exits 2, which the launcher treats
    as fatal: a hostile file is not loaded again by restarts."""


class _MetadataUnpickler(pickle.Unpickler):
    """`pickle.Unpickler` that resolves only `ALLOWED_GLOBALS` and torch dtypes."""

    def __init__(self, file: IO[bytes], *, source: str) -> None:
        super().__init__(file)
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise UnsafeCheckpointError(
            f"{self.source}: refused to unpickle the global {module}.{name}: a torch.distributed.checkpoint "
            "metadata file holds only checkpoint metadata, so this file was crafted or is not one. "
            + _TRUST_HINT
        )


def restricted_load(file: IO[bytes], *, source: str) -> Any:
    """Unpickles DCP metadata from `file`, refusing any global outside the allowlist (names `source`).

    Raises:
        UnsafeCheckpointError: A global outside the allowlist.
        ValueError: Not a pickle of metadata (truncated, a persistent id, arguments the allowed classes
            refuse).
    """
    try:
        return _MetadataUnpickler(file, source=source).load()
    except (UnsafeCheckpointError, MemoryError):
        raise
    except Exception as err:
        # whatever a damaged or crafted pickle makes the allowed classes raise
        raise ValueError(
            f"{source}: not readable torch.distributed.checkpoint metadata ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:200]})"
        ) from None


def _check_metadata(metadata: Any, *, source: str) -> dcp_metadata.Metadata:
    """`metadata` if it is DCP `Metadata` whose storage file names are all safe relative names."""
    if not isinstance(metadata, dcp_metadata.Metadata):
        raise UnsafeCheckpointError(
            f"{source}: not torch.distributed.checkpoint metadata (a {type(metadata).__name__})"
        )
    for index, info in (metadata.storage_data or {}).items():
        fqn = getattr(index, "fqn", index)
        safe_relpath(
            getattr(info, "relative_path", None), source=source, field=f"storage_data[{fqn!r}].relative_path"
        )
    return metadata


class RestrictedReader(FileSystemReader):
    """`FileSystemReader` whose `.metadata` is unpickled through the allowlist and checked
    (see module doc)."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> dcp_metadata.Metadata:
        rank = kwargs.get("rank")
        path = os.path.join(os.fspath(self.path), ".metadata" if rank is None else f"__{rank}.metadata")
        with open(path, "rb") as f:
            metadata = _check_metadata(restricted_load(f, source=path), source=path)
        storage_meta = getattr(metadata, "storage_meta", None)
        if storage_meta is None:
            storage_meta = metadata.storage_meta = dcp_metadata.StorageMeta()
        storage_meta.load_id = self.load_id
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """`DefaultLoadPlanner` that reads non-tensor values with `torch.load(weights_only=True)`.

    Args:
        source: The checkpoint directory, for error messages.
        **kwargs: Passed to `DefaultLoadPlanner`.
    """

    def __init__(self, *, source: str, weights_only: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.weights_only = weights_only

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        try:
            obj = torch.load(value, map_location="cpu", weights_only=self.weights_only)
        except pickle.UnpicklingError as e:
            found = re.search(r"GLOBAL (\S+)", str(e))
            what = f"the global {found.group(1)}" if found else "a Python object"
            raise UnsafeCheckpointError(
                f"{self.source}: the value of {fqn!r} is a pickle naming {what}, which can run arbitrary "
                "code when loaded; it was refused. " + _TRUST_HINT
            ) from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            # the planner's `state_dict` may be a copy of the caller's dict: set both
            self.state_dict[fqn] = obj
            self.original_state_dict[fqn] = obj


def storage_reader(directory: str, *, allow_pickle: bool) -> FileSystemReader:
    """The reader for a sharded checkpoint: restricted unless the user trusts it (`allow_pickle`)."""
    return FileSystemReader(directory) if allow_pickle else RestrictedReader(directory)


def load_planner(directory: str, *, allow_pickle: bool, **kwargs: Any) -> DefaultLoadPlanner:
    """The load planner for a sharded checkpoint: weights-only `BYTE_IO` values unless `allow_pickle`."""
    return SafeLoadPlanner(source=directory, weights_only=not allow_pickle, **kwargs)


def load(state: dict[str, Any], directory: str, *, allow_pickle: bool, **planner_kwargs: Any) -> None:
    """`dcp.load(state)` from `directory` with the reader and planner above.

    Raises:
        UnsafeCheckpointError, UnsafePathError: As raised while reading, not wrapped in DCP's
            `CheckpointException` (which would bury the message in a traceback dump).
        ValueError: Any other failure to read a file of the checkpoint (damaged, truncated), in one line
            naming `directory`.
    """
    try:
        dcp.load(
            state,
            storage_reader=storage_reader(directory, allow_pickle=allow_pickle),
            planner=load_planner(directory, allow_pickle=allow_pickle, **planner_kwargs),
        )
    except CheckpointException as e:
        failures = [exc for exc, _trace in e.failures.values()]
        for exc in failures:
            if isinstance(exc, UnsafeCheckpointError | UnsafePathError):
                raise exc from None
        first = failures[0] if failures else e
        # one line, not DCP's dump of every rank's traceback
        raise ValueError(
            f"{directory}: not a readable sharded checkpoint ({type(first).__name__}: "
            f"{' '.join(str(first).split())[:300]})"
        ) from None
