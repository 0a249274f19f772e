"""A sharded checkpoint's files on hostile input (issue 39, found by `tests/fuzz`): a `.metadata` that is not
metadata and a damaged or crafted data file are one error line naming the checkpoint, never DCP's dump of
tracebacks, and never run code."""

from __future__ import annotations

import hashlib
import json

import pytest

from foundry.checkpoint import load_weights
from foundry.models import build_model
from tests.foundry.checkpoint.test_checkpointer import MODEL, _one_checkpoint
from tests.fuzz.hostile import code_pickle_zip


def _replace(ckpt, name, data):
    """`name` replaced by `data`, and the manifest's size and digest made to match (it is as untrusted)."""
    (ckpt / name).write_bytes(data)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (ckpt / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (".metadata", r"\.metadata: not readable torch\.distributed\.checkpoint metadata \(UnpicklingError"),
        ("__0_0.distcp", r"ep0-ba1: not a readable sharded checkpoint \("),  # was CheckpointException
    ],
)
def test_a_crafted_file_of_a_sharded_checkpoint_is_one_error(tmp_path, name, message):
    _one_checkpoint(tmp_path, fmt="sharded")
    ckpt = tmp_path / "ckpts" / "ep0-ba1"
    _replace(ckpt, name, code_pickle_zip(f"touch {tmp_path / 'PWNED'}"))
    with pytest.raises(ValueError, match=message) as err:
        load_weights(build_model(MODEL), str(ckpt), cache_root=str(tmp_path / "cache"))
    assert "\n" not in str(err.value) and "Traceback" not in str(err.value)
    assert not (tmp_path / "PWNED").exists()
