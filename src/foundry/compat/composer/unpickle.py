"""Reading a `torch.save` file written by Composer without running code from it.

Design note: a Composer checkpoint is a pickle, and unpickling calls whatever globals the file names, so
`torch.load(weights_only=False)` on a file from elsewhere can run anything. `torch.load(weights_only=True)`
refuses it outright (Composer's timestamp holds `datetime.timedelta`, its RNG state numpy arrays), and an
allow-list there would hand numpy's and datetime's real constructors to the file. So this module reads
torch's zip format itself: `data.pkl` goes through a `pickle.Unpickler` whose `find_class` knows a closed set
of names, each mapped to a small stand-in that builds *plain data* (tensors, numbers, strings, containers):

- tensors: `torch._utils._rebuild_tensor_v2` / `_rebuild_parameter` -> a tensor viewing a storage read from
  the zip's `data/<key>` record (bounds checked by `Tensor.set_`); `torch.<Dtype>Storage` -> the dtype;
- containers and scalars: `collections.OrderedDict`, `_codecs.encode` (bytes), `datetime.timedelta` -> float
  seconds, `torch.torch_version.TorchVersion` -> str, `torch.Size` -> tuple;
- numpy arrays (RNG state): `numpy.core.multiarray._reconstruct` + `numpy.ndarray` + `numpy.dtype` ->
  `np.frombuffer` of a numeric dtype (object arrays refused);
- Composer's own objects (`composer.core.time.Timestamp`, `Time`, `TimeUnit`; any enum under `composer.`
  pickled by value) -> dicts and strings.

Every other global is refused before anything is called: `UnsafeCheckpointError` (a `ValueError`, so tools
print one `error:` line) names the file and `module.qualname`. The same reader parses the `BYTE_IO` values of
Composer's sharded (torch.distributed.checkpoint) checkpoints, which are `torch.save` blobs too.
Memory: storages are read into RAM (as `torch.load` without `mmap` does).
"""

from __future__ import annotations

import _compat_pickle
import io
import os
import pickle
import tarfile
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable
from typing import IO, Any

import numpy as np
import torch

from foundry.checkpoint.safe_dcp import UnsafeCheckpointError
from foundry.compat.composer.compressed import compression_of, decompressed
from stackbase.bounded import TooLarge, read_zip_member
from stackbase.limits import LIMITS, limit

__all__ = ["UnsafeCheckpointError", "is_torch_zip", "load_pt", "load_torch_bytes", "read_pt_bytes"]

COMPOSER_STATES = "composer_states.pt"
"""The member of a Composer `.tar` checkpoint that holds the `torch.save` blob."""


class _Plain(dict[str, Any]):
    """A Composer object rebuilt as a dict of its attributes (leading underscores dropped)."""

    kind = "object"

    # `state`: what BUILD passes
    def __setstate__(self, state: Any) -> None:
        # (dict, slots)
        if isinstance(state, tuple) and len(state) == 2:
            state = {**(state[0] or {}), **(state[1] or {})}
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(
                f"unexpected state for a Composer {self.kind}: {type(state).__name__}"
            )
        self.update({str(k).lstrip("_"): v for k, v in state.items()})


class _Time(_Plain):
    """`{"value": 10, "unit": "ba"}`."""

    kind = "Time"


class _Timestamp(_Plain):
    """Its counters as plain numbers (`{"batch": 10, ...}`, as `Timestamp.state_dict()` has them)."""

    kind = "Timestamp"

    def __setstate__(self, state: Any) -> None:
        super().__setstate__(state)
        for key, value in self.items():
            if isinstance(value, _Time):
                self[key] = value.get("value")


# an enum member pickled by value (`TimeUnit('ba')`)
def _enum_value(value: Any) -> Any:
    if not isinstance(value, str | int | float | bool):
        raise pickle.UnpicklingError(f"unexpected enum value {value!r}")
    return value


def _timedelta(days: float = 0, seconds: float = 0, microseconds: float = 0) -> float:
    return float(days) * 86400.0 + float(seconds) + float(microseconds) / 1e6


def _codecs_encode(text: Any, encoding: Any = "utf-8") -> bytes:
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8"):
        raise pickle.UnpicklingError("_codecs.encode with unexpected arguments")
    return text.encode(encoding)


class _Str(str):
    """`torch.torch_version.TorchVersion` (a `str` subclass pickled with NEWOBJ) -> `str`."""

    __slots__ = ()


def _size(dims: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in dims)


class _DType:
    """numpy's `dtype('u4', False, True)` + BUILD `(3, '<', ...)`: the name and byte order of a numeric dtype.

    Never a real `np.dtype` in the pickle's hands: numpy's `dtype.__setstate__` takes flags and fields that
    could turn numbers into object pointers."""

    def __init__(self, name: Any, *_: Any) -> None:
        if not isinstance(name, str) or name[:1] not in ("b", "i", "u", "f", "c") or not name[1:].isdigit():
            raise pickle.UnpicklingError(f"numpy dtype {name!r} refused (numeric dtypes only)")
        self.name, self.order = name, "|"

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">", "|", "="):
            self.order = state[1]

    def resolve(self) -> np.dtype[Any]:
        return np.dtype(("" if self.order in ("|", "=") else self.order) + self.name)


class _Array(np.ndarray):
    """numpy's `_reconstruct(ndarray, (0,), b'b')` + BUILD `(version, shape, dtype, fortran, raw)`: an array
    filled by numpy's own `__setstate__` with a dtype built here, from raw bytes only."""

    def __setstate__(self, state: Any) -> None:
        if not (isinstance(state, tuple) and len(state) == 5):
            raise pickle.UnpicklingError("unexpected numpy array state")
        version, shape, dtype, fortran, raw = state
        if not isinstance(dtype, _DType) or not isinstance(raw, bytes):
            raise pickle.UnpicklingError("numpy array of a non-numeric dtype refused (object arrays)")
        super().__setstate__((int(version), _size(shape), dtype.resolve(), bool(fortran), raw))  # type: ignore[arg-type]


def _np_reconstruct(cls: Any, shape: Any, typecode: Any) -> _Array:
    if cls is not _Array:
        raise pickle.UnpicklingError("numpy _reconstruct of something other than ndarray")
    return np.ndarray.__new__(_Array, (0,), dtype=np.uint8)


# stands in for numpy.core.multiarray.scalar
def _numpy_scalar(dtype: Any, raw: Any = None) -> Any:
    if not isinstance(dtype, _DType) or not isinstance(raw, bytes):
        raise pickle.UnpicklingError("numpy scalar of a non-numeric dtype refused")
    return np.frombuffer(raw, dtype=dtype.resolve())[0].item()


def _rebuild_tensor(
    storage: Any,
    offset: int,
    size: Any,
    stride: Any,
    requires_grad: bool = False,
    hooks: Any = None,
    metadata: Any = None,
) -> torch.Tensor:
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError("tensor rebuilt from something that is not a storage record")
    if hooks:
        raise pickle.UnpicklingError("tensor with backward hooks refused")
    out = torch.empty((0,), dtype=storage.dtype)
    # raises when out of the storage's bounds
    out.set_(storage.data, int(offset), _size(size), _size(stride))
    return out


def _rebuild_parameter(data: Any, requires_grad: Any = False, hooks: Any = None) -> torch.Tensor:
    if not isinstance(data, torch.Tensor) or hooks:
        raise pickle.UnpicklingError("parameter rebuilt from something that is not a plain tensor")
    return data


class _StorageType:
    """`torch.FloatStorage` & co. in a storage record: only the dtype is used."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype


class _Storage:
    def __init__(self, data: torch.UntypedStorage, dtype: torch.dtype) -> None:
        self.data, self.dtype = data, dtype


_STORAGE_TYPES = {
    f"{name}Storage": _StorageType(dtype)
    for name, dtype in {
        "BFloat16": torch.bfloat16,
        "Bool": torch.bool,
        "Byte": torch.uint8,
        "Char": torch.int8,
        "ComplexDouble": torch.complex128,
        "ComplexFloat": torch.complex64,
        "Double": torch.float64,
        "Float": torch.float32,
        "Half": torch.float16,
        "Int": torch.int32,
        "Long": torch.int64,
        "Short": torch.int16,
    }.items()
}
_NUMPY = ("numpy.core.multiarray", "numpy._core.multiarray")
ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch", "Size"): _size,
    ("_codecs", "encode"): _codecs_encode,
    ("datetime", "timedelta"): _timedelta,
    ("torch.torch_version", "TorchVersion"): _Str,
    ("numpy", "ndarray"): _Array,
    ("numpy", "dtype"): _DType,
    **{(m, "_reconstruct"): _np_reconstruct for m in _NUMPY},
    **{(m, "scalar"): _numpy_scalar for m in _NUMPY},
    ("composer.core.time", "Time"): _Time,
    ("composer.core.time", "Timestamp"): _Timestamp,
    ("composer.core.time", "TimeUnit"): _enum_value,
    **{("torch", name): st for name, st in _STORAGE_TYPES.items()},
}
"""`(module, name)` -> the stand-in a pickle gets for it; nothing else resolves."""

_ENUMS = {
    ("composer.core.precision", "Precision"),
    ("composer.core.event", "Event"),
    ("composer.devices.device", "Device"),
}
"""Composer enums pickled by value (`REDUCE(cls, (value,))`): they become the value."""


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], *, source: str, storage: Callable[[str, int], bytes] | None) -> None:
        super().__init__(file)
        self.source, self.storage = source, storage
        self.cache: dict[str, torch.UntypedStorage] = {}

    def find_class(self, module: str, name: str) -> Any:
        # protocol 2 (torch's default) writes Python 2 names (`__builtin__`):
        # read them as Python 3 spells them
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        found = ALLOWED.get((module, name))
        if found is not None:
            return found
        if (module, name) in _ENUMS:
            return _enum_value
        raise UnsafeCheckpointError(
            f"{self.source}: refused to unpickle the global {module}.{name}: a Composer checkpoint is read "
            "without running code from the file, and this global is not one its tensors, timestamps or RNG "
            "state are made of (a crafted file, or a checkpoint holding custom objects)"
        )

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage") or self.storage is None:
            raise pickle.UnpicklingError(f"{self.source}: unexpected persistent id {pid!r:.80}")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, _StorageType) or not isinstance(key, str) or not isinstance(numel, int):
            raise pickle.UnpicklingError(f"{self.source}: malformed storage record {key!r:.40}")
        if key not in self.cache:
            itemsize = torch.empty((), dtype=kind.dtype).element_size()
            # its declared size checked before it is inflated
            raw = self.storage(key, numel * itemsize)
            if len(raw) != numel * itemsize:
                raise pickle.UnpicklingError(
                    f"{self.source}: storage {key} holds {len(raw)} bytes, its record says {numel * itemsize}"
                )
            buffer = (
                torch.frombuffer(bytearray(raw), dtype=torch.uint8)
                if raw
                else torch.empty(0, dtype=torch.uint8)
            )
            self.cache[key] = buffer.untyped_storage()
        return _Storage(self.cache[key], kind.dtype)


MAX_PICKLE_BYTES = LIMITS["PICKLE_MB"][0] << 20
"""torch's `data.pkl` record holds the structure, not the tensors: megabytes even for a 70B checkpoint (the
default of `FOUNDRY_MAX_PICKLE_MB`, read when a checkpoint is opened)."""


def is_torch_zip(head: bytes) -> bool:
    """Whether a file starting with `head` is a zip (torch's format since 1.6)."""
    return head[:4] == b"PK\x03\x04"


def load_torch_bytes(data: IO[bytes], *, source: str) -> Any:
    """Restricted `torch.load` of a zip-format `torch.save` blob (a file object) to plain data on CPU.

    Raises:
        UnsafeCheckpointError: The pickle names a global outside the allow-list (names it and `source`).
        ValueError: Not a zip-format torch file, or a malformed one.
    """
    try:
        archive = zipfile.ZipFile(data)
    except (ValueError, EOFError, NotImplementedError, OverflowError) as err:
        # a damaged central directory
        raise ValueError(f"{source}: a damaged zip file ({type(err).__name__}: {err})") from None
    except zipfile.BadZipFile:
        raise ValueError(
            f"{source}: not a zip-format torch file (legacy torch.save files are not read here: load it in "
            "Composer's environment and save it again with torch >= 1.6)"
        ) from None
    with archive:
        pkls = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkls) != 1:
            raise ValueError(f"{source}: a zip file without torch's data.pkl record")
        prefix = pkls[0][: -len("data.pkl")]
        names = set(archive.namelist())
        order = (
            read_zip_member(archive, prefix + "byteorder", source=source, limit=16).decode()
            if prefix + "byteorder" in names
            else "little"
        )
        if order != "little":
            raise ValueError(f"{source}: big-endian tensors are not supported")

        def storage(key: str, expected: int) -> bytes:
            name = f"{prefix}data/{key}"
            if name not in names:
                raise pickle.UnpicklingError(f"{source}: storage record {key!r:.40} is missing")
            return read_zip_member(archive, name, source=source, expected=expected)

        pickled = read_zip_member(archive, pkls[0], source=source, limit=limit("PICKLE_MB") << 20)
        try:
            obj = _Unpickler(io.BytesIO(pickled), source=source, storage=storage).load()
        except (UnsafeCheckpointError, TooLarge, MemoryError):
            raise
        except ValueError as err:
            if str(err).startswith(source):
                # a record's own error, naming the file
                raise
            raise ValueError(f"{source}: not a readable torch checkpoint ({err})") from None
        except (pickle.UnpicklingError, EOFError, TypeError, RuntimeError, AttributeError) as err:
            raise ValueError(f"{source}: not a readable torch checkpoint ({err})") from None
        except (OverflowError, KeyError, IndexError) as err:
            # a crafted pickle's memo, offsets or sizes
            raise ValueError(
                f"{source}: not a readable torch checkpoint ({type(err).__name__}: {err})"
            ) from None
    return obj


def read_pt_bytes(path: str) -> IO[bytes]:
    """The `torch.save` blob of a Composer `.pt` file (or of the `composer_states.pt` in a `.tar`)."""
    with open(path, "rb") as f:
        head = f.read(4)
    if is_torch_zip(head):
        return open(path, "rb")
    kind = compression_of(head)
    # Composer's `.pt.zst` / `.pt.lz4`: a torch zip inside (bounded inflation)
    if kind is not None:
        inner = decompressed(path, kind)
        if not is_torch_zip(inner.read(4)):
            inner.close()
            raise ValueError(f"{path}: a {kind} stream that does not hold a zip-format torch file")
        inner.seek(0)
        return inner
    if tarfile.is_tarfile(path):
        try:
            with tarfile.open(path, "r:*") as tar:
                member = next((m for m in tar.getmembers() if m.name.lstrip("./") == COMPOSER_STATES), None)
                if member is None or not member.isfile():
                    raise ValueError(
                        f"{path}: a tar file without {COMPOSER_STATES}: not a Composer checkpoint"
                    )
                # read whole below: check first
                if member.offset_data + member.size > os.path.getsize(path):
                    raise ValueError(
                        f"{path}: {COMPOSER_STATES} declares {member.size} bytes, more than the file holds: "
                        "a truncated or crafted tar"
                    )
                blob = tar.extractfile(member)
                # a regular file member
                assert blob is not None
                return io.BytesIO(blob.read())
        except (tarfile.TarError, EOFError, zlib.error) as err:
            raise ValueError(f"{path}: not a readable tar file ({err})") from None
    raise ValueError(
        f"{path}: not a torch checkpoint this reader takes (a zip-format .pt, a Composer .tar, .pt.zst or "
        ".pt.lz4); other compressed checkpoints (.pt.gz, .pt.bz2, ...) must be decompressed first"
    )


def load_pt(path: str) -> Any:
    """Restricted load of a Composer checkpoint file (see the module doc); plain data on CPU."""
    with read_pt_bytes(path) as blob:
        return load_torch_bytes(blob, source=path)
