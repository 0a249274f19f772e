"""The restricted reader of Composer `.pt` files: plain data comes back, anything that could run code is refused
without running (the side effect of a hostile `__reduce__` never happens)."""

from __future__ import annotations

import datetime
import io
import os
import tarfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from foundry.compat.composer.unpickle import UnsafeCheckpointError, load_pt


class _Payload:
    """Unpickling this runs `os.system(touch <marker>)`: what a crafted checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


class _Eval:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return eval, ("1 + 1",)


def _composer_like(extra: object) -> dict[str, object]:
    return {"state": {"model": {"model.w": torch.ones(2)}, "callbacks": {"X": extra}}, "rng": []}


def test_hostile_reduce_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "ep0-ba1-rank0.pt"
    torch.save(_composer_like(_Payload(marker)), path)
    with pytest.raises(UnsafeCheckpointError, match=r"refused to unpickle the global (posix|os)\.system"):
        load_pt(str(path))
    assert not marker.exists()


def test_hostile_pickle_inside_a_composer_tar_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    blob = io.BytesIO()
    torch.save(_composer_like(_Payload(marker)), blob)
    path = tmp_path / "ep0-ba1-rank0.pt.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("composer_states.pt")
        info.size = len(blob.getvalue())
        tar.addfile(info, io.BytesIO(blob.getvalue()))
    with pytest.raises(UnsafeCheckpointError, match="system"):
        load_pt(str(path))
    assert not marker.exists()


@pytest.mark.parametrize(
    "obj, name",
    [
        (_Eval(), "builtins.eval"),
        (np.array([1, "x"], dtype=object), "numpy dtype 'O8' refused"),
        ({1, 2}, "builtins.set"),
    ],
)
def test_other_globals_are_refused_by_name(tmp_path: Path, obj: object, name: str) -> None:
    path = tmp_path / "c.pt"
    torch.save(_composer_like(obj), path)
    with pytest.raises(ValueError, match=name):
        load_pt(str(path))


def test_plain_data_round_trips(tmp_path: Path) -> None:
    base = torch.arange(24, dtype=torch.float32).view(4, 6)
    state = {
        "f32": base,
        "view": base[1:, ::2],  # shares the storage, non-contiguous
        "bf16": torch.randn(3, dtype=torch.bfloat16),
        "i64": torch.tensor([1, -(2**40)]),
        "bool": torch.tensor([True, False]),
        "scalar": torch.tensor(3.0),
        "od": OrderedDict(a=1, b=(2.5, "x", None)),
        "wct": datetime.timedelta(days=1, seconds=2, microseconds=500),
        "np": np.random.RandomState(3).get_state(),
        "bytes": b"\x00\xff",
        "version": torch.__version__,
    }
    path = tmp_path / "plain.pt"
    torch.save(state, path)
    got = load_pt(str(path))
    for key in ("f32", "view", "bf16", "i64", "bool", "scalar"):
        assert torch.equal(got[key], state[key]) and got[key].dtype == state[key].dtype, key
    assert got["od"] == state["od"] and isinstance(got["od"], OrderedDict)
    assert got["wct"] == pytest.approx(86402.0005)
    assert got["np"][0] == "MT19937" and np.array_equal(got["np"][1], state["np"][1])
    assert got["np"][1].dtype == np.uint32 and got["np"][2:] == state["np"][2:]
    assert got["bytes"] == b"\x00\xff" and got["version"] == str(torch.__version__)


def test_a_storage_record_out_of_bounds_is_an_error_not_a_read(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    torch.save({"t": torch.zeros(4)}, path)
    import zipfile

    src = zipfile.ZipFile(path)
    out = tmp_path / "bad.pt"
    with zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("data/0"):
                data = data[:8]  # the record says 4 floats, 2 are there
            dst.writestr(item, data)
    with pytest.raises(ValueError, match="declares 8 bytes, its index says 16"):  # checked before it is read
        load_pt(str(out))


def test_a_non_torch_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "x.pt"
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="not a torch checkpoint this reader takes"):
        load_pt(str(path))


# Inputs the fuzz suite (`tests/fuzz/test_fuzz_composer.py`, issue 39) found ending in a raw traceback.


def _real_pt(tmp_path: Path) -> bytes:
    path = tmp_path / "real.pt"
    torch.save(_composer_like(1), path)
    return path.read_bytes()


@pytest.mark.parametrize("how", ["truncated", "huge"])
def test_a_truncated_or_lying_tar_is_one_error(tmp_path: Path, how: str) -> None:
    from tests.fuzz.hostile import composer_tar

    path = tmp_path / "ckpt.tar"
    path.write_bytes(composer_tar(_real_pt(tmp_path), "composer_states.pt", how))  # was tarfile.ReadError
    with pytest.raises(
        ValueError, match=r"ckpt\.tar: (not a readable tar file|composer_states\.pt declares)"
    ):
        load_pt(str(path))


def test_every_flipped_byte_is_one_error_naming_the_file_or_a_correct_load() -> None:
    """Each byte of a small checkpoint flipped in turn: a record's data (was BadZipFile: Bad CRC-32), a record
    name in a local header (was UnicodeDecodeError), a version field (was NotImplementedError), an offset (was
    `ValueError: negative seek value` and OverflowError, naming no file)."""
    from foundry.compat.composer.unpickle import load_torch_bytes

    buf = io.BytesIO()
    torch.save(_composer_like(1), buf)
    data = buf.getvalue()
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        try:
            load_torch_bytes(io.BytesIO(bytes(flipped)), source="x.pt")
        except ValueError as err:
            assert str(err).startswith("x.pt: "), (i, err)


def test_a_tensor_offset_past_int64_names_the_file(tmp_path: Path) -> None:
    from tests.fuzz.hostile import tensor_zip

    path = tmp_path / "ckpt.pt"
    path.write_bytes(tensor_zip(2**63, [256, 256], [], 227, "BoolStorage", 227))  # was a bare ValueError
    with pytest.raises(ValueError, match=r"ckpt\.pt: not a readable torch checkpoint \(Overflow"):
        load_pt(str(path))
