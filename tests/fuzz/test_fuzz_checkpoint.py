"""Fuzz (issue 39), entry point 2: our own checkpoints and their `manifest.json`, as `train.py` reads them:
`checkpoint.load_path` (a checkpoint folder, its save folder or its manifest; `load_weights`, `resolve_start` +
`load_into`) and autoresume (`find_checkpoints`, `newest_intact`, `fetch`, the full and sharded loaders).

Each input is a save folder holding two valid checkpoints of a tiny MPT (full or sharded) with one hostile
edit: a manifest value, key or file name replaced (wrong types, huge numbers, `../x`, deep JSON), its text
broken, or a checkpoint file's bytes edited, with the manifest's size and sha256 made to match when asked (the
manifest is as untrusted as the files), or a file replaced by a pickle that calls `os.system`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from tests.fuzz import hostile
from tests.fuzz.harness import fuzz

ENTRY = "checkpoints and manifest.json"
ALLOWED = (ValueError, FileNotFoundError)  # train.py's one-line errors (foundry.cli.USER_ERRORS)
NAMES = ("manifest.json", "checkpoint", "ep0-ba")
SHORT_EXAMPLES = 20
FORMATS = ("full", "sharded")
ENTRIES = ("load_weights", "load_weights_folder", "manifest_path", "load_path", "autoresume")


def prepare(work: Path) -> dict[str, Path]:
    from tests.foundry.checkpoint.test_checkpointer import _one_checkpoint

    out = {}
    for fmt in FORMATS:
        _one_checkpoint(work / fmt, fmt=fmt)
        ckpts = work / fmt / "ckpts"
        shutil.copytree(ckpts / "ep0-ba1", ckpts / "ep0-ba2")
        manifest = json.loads((ckpts / "ep0-ba2" / "manifest.json").read_text())
        manifest["step"] = 2
        (ckpts / "ep0-ba2" / "manifest.json").write_text(json.dumps(manifest))
        out[fmt] = ckpts
    return out


def cases() -> st.SearchStrategy[dict[str, Any]]:
    file_edit = st.tuples(st.just("file"), st.integers(0, 20), hostile.byte_edits(), st.booleans())
    code = st.tuples(st.just("code"), st.integers(0, 20))
    torch_file = st.tuples(st.just("torch"), st.integers(0, 20), _torch_values())
    return st.fixed_dictionaries(
        {
            "format": st.sampled_from(FORMATS),
            "target": st.sampled_from(["ep0-ba1", "ep0-ba2"]),
            "edit": hostile.json_edits() | file_edit | code | torch_file,
            "entry": st.sampled_from(ENTRIES),
        }
    )


def _torch_values() -> st.SearchStrategy[Any]:
    """What a `torch.save` file of a checkpoint could hold instead: plain values, tensors of odd shapes and
    dtypes, and the structure of ours with one part replaced."""
    tensors = st.builds(
        lambda shape, dtype: ("tensor", shape, dtype),
        st.lists(st.integers(0, 4), max_size=3),
        st.sampled_from(["float32", "int64", "bool", "float16", "complex64"]),
    )
    leaf = hostile.scalars() | tensors
    tree = st.recursive(
        leaf,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile.strings(), inner, max_size=3),
        max_leaves=6,
    )
    ours = st.builds(
        lambda key, value: ("ours", key, value),
        st.sampled_from(["optimizer", "run", "rng", "state", "param_groups", "weight", "scheduler", "step"]),
        tree,
    )
    return tree | ours


def _materialize(value: Any, original: Any) -> Any:
    """`value` from `_torch_values` as the object to save (`original`: the file's real content)."""
    import torch

    if isinstance(value, tuple) and value and value[0] == "tensor":
        return torch.zeros(value[1], dtype=getattr(torch, value[2]))
    if isinstance(value, tuple) and value and value[0] == "ours":
        _, key, inner = value
        return _replace(original, key, _materialize(inner, None))
    if isinstance(value, list):
        return [_materialize(v, None) for v in value]
    if isinstance(value, dict):
        return {k: _materialize(v, None) for k, v in value.items()}
    return value


def _replace(obj: Any, key: str, new: Any) -> Any:
    """`obj` with the first value under `key` (searched depth first), or else the first tensor, replaced."""
    import torch

    done = False

    def walk(node: Any) -> Any:
        nonlocal done
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if not done and k == key:
                    out[k], done = new, True
                else:
                    out[k] = walk(v)
            return out
        if isinstance(node, list | tuple):
            return type(node)(walk(v) for v in node)
        if not done and isinstance(node, torch.Tensor):
            done = True
            return new
        return node

    return walk(obj)


def EXAMPLES() -> list[dict[str, Any]]:
    valid = [
        {"format": fmt, "target": "ep0-ba2", "edit": hostile.NO_EDIT, "entry": entry, "check": True}
        for fmt, entry in zip(FORMATS * 3, ENTRIES)
    ]
    code = [  # a pickle that would run `touch PWNED`, with the manifest's digest to match
        {"format": fmt, "target": "ep0-ba2", "edit": ("code", i), "entry": entry}
        for fmt, i, entry in (
            ("full", 0, "load_weights"),
            ("full", 1, "load_path"),
            ("sharded", 0, "autoresume"),
        )
    ]
    return valid + code


def write_roots(folder: Path) -> list[Path]:
    return [folder / "scratch", folder / "cache"]


def planted(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("evil*") if p.is_file()]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(case: dict[str, Any], folder: Path, base: dict[str, Path]) -> dict[str, Any]:
    save = folder / "a" / "b" / "ckpts"
    shutil.copytree(base[case["format"]], save)
    ckpt = save / case["target"]
    manifest = ckpt / "manifest.json"
    files = sorted(p.name for p in ckpt.iterdir() if p.name != "manifest.json")
    for where in (save, save.parent, folder / "abs"):  # valid copies where hostile names point
        where.mkdir(parents=True, exist_ok=True)
        for name in files:
            shutil.copyfile(ckpt / name, where / f"evil-{name}")
    edit = case["edit"]
    if edit[0] in ("file", "code", "torch"):
        name = files[edit[1] % len(files)]
        if edit[0] == "torch":
            import io

            import torch

            pt = [f for f in files if f.endswith(".pt")] or files
            name = pt[edit[1] % len(pt)]
            try:
                original = torch.load(ckpt / name, weights_only=True)
            except Exception:  # a DCP file: replaced whole
                original = None
            buf = io.BytesIO()
            torch.save(_materialize(edit[2], original), buf)
            data, fix = buf.getvalue(), True
        elif edit[0] == "code":
            data = hostile.code_pickle_zip(f"touch {folder / 'PWNED'}")
            fix = True
        else:
            data = hostile.apply_bytes((ckpt / name).read_bytes(), edit[2])
            fix = edit[3]
        (ckpt / name).write_bytes(data)
        if fix:  # the manifest agrees: only the loaders' own checks stand in the way
            m = json.loads(manifest.read_text())
            m["files"][name] = {"bytes": len(data), "sha256": _sha(data)}
            manifest.write_text(json.dumps(m))
    else:

        def fill(name: str) -> str:
            return name.replace("{abs}", str(folder / "abs")).replace("{shard}", "evil-" + files[0])

        manifest.write_bytes(hostile.apply_json_edit(manifest.read_text(), edit, fill=fill))
    return {**case, "save": save, "ckpt": ckpt}


def attempt(built: dict[str, Any], folder: Path) -> None:
    from dataclasses import asdict

    from foundry.checkpoint import CheckpointConfig, load_weights, resolve_start
    from foundry.checkpoint.layout import open_checkpoint
    from foundry.checkpoint.resume import load_into
    from foundry.models import build_model
    from tests.foundry.checkpoint.test_checkpointer import MODEL, _trainer

    scratch, cache = str(folder / "scratch"), str(folder / "cache")
    entry = built["entry"]
    if entry in ("load_weights", "load_weights_folder", "manifest_path"):
        path = {
            "load_weights": built["ckpt"],
            "load_weights_folder": built["save"],
            "manifest_path": built["ckpt"] / "manifest.json",
        }[entry]
        if entry == "manifest_path":
            info = open_checkpoint(str(path), scratch=scratch)
            assert info.name in ("ep0-ba1", "ep0-ba2")
            return
        info = load_weights(build_model(MODEL), str(path), cache_root=cache)
        assert info.name in ("ep0-ba1", "ep0-ba2")
        if built.get("check"):
            assert info.name == "ep0-ba2"
        return
    if entry == "load_path":
        cfg = CheckpointConfig(load_path=str(built["ckpt"]))
    else:
        cfg = CheckpointConfig(save_folder=str(built["save"]))
    start = resolve_start(cfg, run_name="t", scratch=scratch)
    if start is None:
        return
    trainer = _trainer(2)
    load_into(trainer, start, cfg=cfg, cache_root=cache, model_config=asdict(MODEL))
    if built.get("check"):
        assert trainer.state.step == 1 and start.info.name == "ep0-ba2"


def test_short(tmp_path):
    fuzz(__file__, tmp_path)


@pytest.mark.slow
def test_long(tmp_path):
    fuzz(__file__, tmp_path, long=True)
