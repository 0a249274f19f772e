"""Fuzz (issue 39), entry point 3: Composer checkpoints read by `--from composer` (`scripts/convert_checkpoint.py`)
and `checkpoint.load_path` (`foundry.compat.composer.to_foundry`, the allow-list unpickler over
`stackbase.bounded.read_zip_member`).

Each input is a valid Composer `.pt` of a tiny MPT (as llm-foundry writes it) with one hostile change: a part of
its state replaced (wrong types, odd tensors), its bytes edited, a zip record resized, renamed, dropped or
inflated (a bomb), `data.pkl` replaced by random opcodes, by a pickle calling `os.system`, or by a tensor whose
storage record, offset, size and stride lie, or the file wrapped in a `.tar` with a hostile member.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from tests.fuzz import hostile
from tests.fuzz.harness import fuzz

ENTRY = "Composer checkpoints (--from composer)"
ALLOWED = (ValueError, FileNotFoundError)  # train.py's (checkpoint.load_path); the tool also takes OSError
NAMES = ("composer", ".pt", ".tar")
SHORT_EXAMPLES = 20
MEMORY_MB = 1024


def prepare(work: Path) -> dict[str, Any]:
    import torch

    from tests.foundry.compat.test_composer_checkpoint import _model_and_optimizer, composer_state

    model, opt = _model_and_optimizer()
    state = composer_state(model, opt)
    buf = io.BytesIO()
    torch.save(state, buf)
    return {"state": state, "pt": buf.getvalue()}


def _tree() -> st.SearchStrategy[Any]:
    tensors = st.builds(
        lambda shape, dtype: ("tensor", shape, dtype),
        st.lists(st.integers(0, 4), max_size=3),
        st.sampled_from(["float32", "int64", "bool", "float16"]),
    )
    return st.recursive(
        hostile.scalars() | tensors,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile.strings(), inner, max_size=3),
        max_leaves=6,
    )


KEYS = [
    "state",
    "model",
    "optimizers",
    "DecoupledAdamW",
    "param_groups",
    "params",
    "lr",
    "schedulers",
    "LambdaLR",
    "last_epoch",
    "timestamp",
    "Timestamp",
    "batch",
    "dataset_state",
    "train",
    "integrations",
    "content",
    "d_model",
    "n_layers",
    "attn_config",
    "metadata",
    "rng",
    "torch",
    "numpy",
    "python",
    "exp_avg",
    "step",
]


def _records() -> st.SearchStrategy[tuple[Any, ...]]:
    which = st.sampled_from(["data.pkl", "data/0", "data/1", "byteorder", "version"])
    return st.one_of(
        st.tuples(st.just("resize"), which, st.sampled_from([0, 1, 3, 7, 65536]) | st.integers(0, 4096)),
        st.tuples(st.just("bomb"), which, st.sampled_from([1 << 20, 64 << 20])),
        st.tuples(st.just("drop"), which),
        st.tuples(st.just("rename"), which, hostile.names()),
        st.tuples(st.just("big-endian")),
        st.tuples(st.just("two-pickles")),
        st.tuples(st.just("lie"), which, hostile.integers()),
    )


def cases() -> st.SearchStrategy[dict[str, Any]]:
    tensor_pickle = st.tuples(
        st.just("tensor"),
        hostile.integers(),  # offset
        st.lists(hostile.integers(), max_size=3),  # size
        st.lists(hostile.integers(), max_size=3),  # stride
        hostile.integers(),  # numel the storage record claims
        st.sampled_from(["FloatStorage", "LongStorage", "BoolStorage", "ComplexDoubleStorage"]),
        st.integers(0, 256),  # bytes the record holds
    )
    edit = st.one_of(
        st.tuples(st.just("struct"), st.sampled_from(KEYS), _tree()),
        st.tuples(st.just("bytes"), hostile.byte_edits()),
        st.tuples(st.just("record"), _records()),
        st.tuples(st.just("opcodes"), st.binary(max_size=64)),
        tensor_pickle,
        st.tuples(
            st.just("tar"), hostile.names(), st.sampled_from(["plain", "truncated", "huge", "link", "dir"])
        ),
    )
    return st.fixed_dictionaries({"edit": edit, "weights_only": st.booleans()})


def EXAMPLES() -> list[dict[str, Any]]:
    return [
        {"edit": ("none",), "weights_only": False, "check": True},
        {"edit": ("tar", "composer_states.pt", "plain"), "weights_only": False, "check": True},
        {"edit": ("code",), "weights_only": False},
        {"edit": ("code",), "weights_only": True},
        {"edit": ("record", ("bomb", "data/0", 64 << 20)), "weights_only": False},
    ]


def write_roots(folder: Path) -> list[Path]:
    return [folder / "out", folder / "work"]


# ------------------------------------------------------------------------------------------------ building


def _materialize(value: Any) -> Any:
    import torch

    if isinstance(value, tuple) and value and value[0] == "tensor":
        return torch.zeros(value[1], dtype=getattr(torch, value[2]))
    if isinstance(value, list):
        return [_materialize(v) for v in value]
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    return value


def _rezip(blob: bytes, change: Any) -> bytes:
    """`blob` (a torch zip) rewritten record by record; `change(name, data) -> [(name, data, compress)]`."""
    src, out = zipfile.ZipFile(io.BytesIO(blob)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            for name, data, compress in change(info.filename, src.read(info.filename)):
                dst.writestr(name, data, zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED)
    return out.getvalue()


def _lie(blob: bytes, record: str, size: int) -> bytes:
    """`blob` with the uncompressed size the zip's headers declare for `record` replaced by `size`."""
    import struct

    data, value = bytearray(blob), size % 2**32
    for info in zipfile.ZipFile(io.BytesIO(blob)).infolist():
        if info.filename.endswith("/" + record):
            struct.pack_into("<I", data, info.header_offset + 22, value)  # the local header's
    cd = blob.find(b"PK\x01\x02")
    while cd != -1:  # and the central directory's
        name_len = struct.unpack_from("<H", blob, cd + 28)[0]
        if blob[cd + 46 : cd + 46 + name_len].endswith(b"/" + record.encode()):
            struct.pack_into("<I", data, cd + 24, value)
        cd = blob.find(b"PK\x01\x02", cd + 4)
    return bytes(data)


def build(case: dict[str, Any], folder: Path, base: dict[str, Any]) -> dict[str, Any]:
    import torch

    edit, pt = case["edit"], base["pt"]
    suffix = ".pt"
    kind = edit[0]
    if kind == "struct":
        state = hostile.replace_under(base["state"], edit[1], _materialize(edit[2]))
        buf = io.BytesIO()
        torch.save(state, buf)
        pt = buf.getvalue()
    elif kind == "bytes":
        pt = hostile.apply_bytes(pt, edit[1])
    elif kind == "code":
        pt = hostile.code_pickle_zip(f"touch {folder / 'PWNED'}")
    elif kind == "opcodes":
        pt = _rezip(pt, lambda n, d: [(n, b"\x80\x02" + edit[1] if n.endswith("/data.pkl") else d, False)])
    elif kind == "tensor":
        pt = hostile.tensor_zip(*edit[1:])
    elif kind == "tar":
        pt, suffix = hostile.composer_tar(pt, edit[1], edit[2]), ".tar"
    elif kind == "record":
        op, *args = edit[1]
        if op == "resize":
            pt = _rezip(pt, lambda n, d: [(n, bytes(args[1]) if n.endswith("/" + args[0]) else d, False)])
        elif op == "bomb":
            pt = _rezip(
                pt,
                lambda n, d: [
                    (n, bytes(args[1]) if n.endswith("/" + args[0]) else d, n.endswith("/" + args[0]))
                ],
            )
        elif op == "drop":
            pt = _rezip(pt, lambda n, d: [] if n.endswith("/" + args[0]) else [(n, d, False)])
        elif op == "rename":
            pt = _rezip(
                pt, lambda n, d: [(n.replace(args[0], args[1]) if n.endswith("/" + args[0]) else n, d, False)]
            )
        elif op == "big-endian":
            pt = _rezip(pt, lambda n, d: [(n, b"big" if n.endswith("/byteorder") else d, False)])
        elif op == "two-pickles":
            pt = _rezip(
                pt,
                lambda n, d: [
                    (n, d, False),
                    *([("other/data.pkl", d, False)] if n.endswith("/data.pkl") else []),
                ],
            )
        elif op == "lie":
            pt = _lie(pt, args[0], args[1])
    path = folder / f"ep0-ba5-rank0{suffix}"
    path.write_bytes(pt)
    return {**case, "path": path}


def attempt(built: dict[str, Any], folder: Path) -> None:
    from foundry.compat.composer import to_foundry
    from foundry.compat.composer.checkpoint import is_composer_checkpoint

    path = built["path"]
    (folder / "work").mkdir()
    assert is_composer_checkpoint(str(path)) or built["edit"][0] in ("bytes", "tar"), "not recognised"
    where, what = to_foundry(
        str(path),
        str(folder / "out" / "ep0-ba5"),
        weights_only=built["weights_only"],
        work_dir=str(folder / "work"),
    )
    assert Path(where).is_dir() and (Path(where) / "model.pt").is_file(), where
    if built.get("check"):
        assert (Path(where) / "state.pt").is_file(), what
    # then as a run starts from it (`checkpoint.load_path`): weights, optimizer state
    from foundry.checkpoint.state import WeightMismatch, load_full
    from foundry.errors import ConfigError
    from tests.foundry.compat.test_composer_checkpoint import _model_and_optimizer

    model, opt = _model_and_optimizer()
    try:
        out = load_full(
            where, model, None if built["weights_only"] else opt, strict=True, allow_pickle=False, rank=0
        )
    except WeightMismatch as err:  # `load_into` reports it so (`weight_mismatch_error`)
        raise ConfigError(f"{path}: {err.detail}") from None
    assert built["weights_only"] or isinstance(out, dict)


def test_short(tmp_path):
    fuzz(__file__, tmp_path)


@pytest.mark.slow
def test_long(tmp_path):
    fuzz(__file__, tmp_path, long=True)
