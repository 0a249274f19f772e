"""Checkpoint file contents on hostile input (issue 39, found by `tests/fuzz`): a file that `torch.load` cannot
read, or that holds values of the wrong type where weights, optimizer state or run state belong, is one
`ValueError` naming it (its manifest digest agreeing: the manifest is as untrusted as the files)."""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict

import pytest
import torch

from foundry.checkpoint import CheckpointConfig, load_weights, resolve_start
from foundry.checkpoint.resume import load_into
from foundry.errors import ConfigError
from foundry.models import build_model
from tests.foundry.checkpoint.test_checkpointer import MODEL, _one_checkpoint, _trainer
from tests.fuzz.hostile import apply_bytes


def _replace(ckpt, name, data):
    (ckpt / name).write_bytes(data)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (ckpt / "manifest.json").write_text(json.dumps(manifest))


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _resume(tmp_path, ckpt):
    cfg = CheckpointConfig(load_path=str(ckpt))
    start = resolve_start(cfg, run_name="t", scratch=str(tmp_path / "scratch"))
    load_into(_trainer(2), start, cfg=cfg, cache_root=str(tmp_path / "cache"), model_config=asdict(MODEL))


def test_a_state_file_without_its_keys_is_named(tmp_path):
    _one_checkpoint(tmp_path)
    ckpt = tmp_path / "ckpts" / "ep0-ba1"
    _replace(ckpt, "state.pt", _saved({}))  # was KeyError: 'optimizer'
    with pytest.raises(
        ValueError, match=r"state\.pt: not a checkpoint file of this library \(expected an object"
    ):
        _resume(tmp_path, ckpt)


def test_weights_that_are_not_tensors_are_named(tmp_path):
    _one_checkpoint(tmp_path)
    ckpt = tmp_path / "ckpts" / "ep0-ba1"
    weights = torch.load(ckpt / "model.pt", weights_only=True)
    weights["transformer.wte.weight"] = [-5046, {}, 37320]  # was RuntimeError from set_model_state_dict
    _replace(ckpt, "model.pt", _saved(weights))
    with pytest.raises(ValueError, match=r"model\.pt: not model weights: 'transformer\.wte\.weight' is not"):
        _resume(tmp_path, ckpt)


def test_a_damaged_zip_with_a_matching_digest_is_named(tmp_path):
    _one_checkpoint(tmp_path)
    ckpt = tmp_path / "ckpts" / "ep0-ba1"
    _replace(
        ckpt, "model.pt", (ckpt / "model.pt").read_bytes()[:200]
    )  # was RuntimeError (PytorchStreamReader)
    with pytest.raises(ValueError, match=r"model\.pt: not a readable checkpoint file \(RuntimeError"):
        load_weights(build_model(MODEL), str(ckpt), cache_root=str(tmp_path / "cache"))


def test_a_flipped_byte_that_breaks_torch_load_with_unicode_is_named(tmp_path):
    _one_checkpoint(tmp_path, fmt="sharded")
    ckpt = tmp_path / "ckpts" / "ep0-ba1"
    _replace(
        ckpt,
        "common.pt",
        apply_bytes((ckpt / "common.pt").read_bytes(), ("flip", 628 * 1024 * 1024 // 1000, 256)),
    )
    with pytest.raises(ValueError, match=r"common\.pt: not a readable checkpoint file \(UnicodeDecodeError"):
        _resume(tmp_path, ckpt)


@pytest.mark.parametrize("fmt", ["full", "sharded"])
def test_a_run_state_of_the_wrong_type_is_named(tmp_path, fmt):
    _one_checkpoint(tmp_path, fmt=fmt)
    ckpt = tmp_path / "ckpts" / "ep0-ba1"
    name = "state.pt" if fmt == "full" else "common.pt"
    state = torch.load(ckpt / name, weights_only=True)
    state["run"] = []  # was TypeError (foundry/train/state.py: run["state"] of a list)
    _replace(ckpt, name, _saved(state))
    with pytest.raises(ValueError, match=r"ep0-ba1: its run state .* cannot be restored \(TypeError"):
        _resume(tmp_path, ckpt)


def test_weights_of_another_model_from_load_weights_are_a_config_error(tmp_path):
    """`load_weights` (task=eval, exports) let `WeightMismatch`, a RuntimeError, out as a traceback."""
    _one_checkpoint(tmp_path)
    ckpt = tmp_path / "ckpts" / "ep0-ba1"
    _replace(ckpt, "model.pt", _saved({}))
    with pytest.raises(ConfigError, match=r"checkpoint\.load_path=.*ep0-ba1 holds other weights"):
        load_weights(build_model(MODEL), str(ckpt), cache_root=str(tmp_path / "cache"))
