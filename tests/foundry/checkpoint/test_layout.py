"""`manifest.json` parsing on hostile input (issue 39): each case is an input the fuzz suite (`tests/fuzz`) found
ending in a raw traceback (`JSONDecodeError`, `TypeError`, `UnicodeDecodeError`) or printing a secret; each is
now one error naming the manifest, or a warning with the path masked."""

from __future__ import annotations

import json
import logging

import pytest

from foundry.checkpoint import CheckpointStore
from foundry.checkpoint.layout import find_checkpoints, open_checkpoint
from tests.foundry.checkpoint.test_checkpointer import _one_checkpoint


@pytest.fixture
def ckpt(tmp_path):
    _one_checkpoint(tmp_path)
    return tmp_path / "ckpts" / "ep0-ba1"


def _edit(ckpt, fn):
    manifest = json.loads((ckpt / "manifest.json").read_text())
    fn(manifest)
    (ckpt / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"", r"manifest\.json: not valid JSON \(Expecting value: line 1 column 1\)"),  # was JSONDecodeError
        (b"\xea\x00{}", r"manifest\.json: not UTF-8 text \(byte 0\)"),  # was UnicodeDecodeError (store.py)
        (b"[" * 100_000 + b"]" * 100_000, r"manifest\.json: JSON nested too deeply \(over 100 levels\)"),
        (b"[]", r"manifest\.json: not a checkpoint manifest \(a JSON object\)"),
    ],
)
def test_a_manifest_that_is_not_json_is_one_error(ckpt, tmp_path, text, message):
    (ckpt / "manifest.json").write_bytes(text)
    with pytest.raises(ValueError, match=message):
        open_checkpoint(str(ckpt / "manifest.json"), scratch=str(tmp_path / "scratch"))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("format"), r"missing \['format'\]"),  # was TypeError: Manifest.__init__() missing
        (lambda m: m.update(shards=1), r"unknown keys \['shards'\]"),  # was TypeError: unexpected keyword
        (lambda m: m.update(step="2"), "step must be an int >= 0"),  # autoresume sorted it against ints
        (lambda m: m.update(format_version="9"), "format_version must be an int"),  # was TypeError: '>'
        (
            lambda m: m.update(world_size=0, weights_only=1),
            "world_size must be an int >= 1; weights_only must",
        ),
        (lambda m: m["files"]["model.pt"].update(sha256="x"), r"files\['model.pt'\] must be .*64 hex digits"),
        (lambda m: m["files"]["model.pt"].update(bytes=2**64), r"files\['model.pt'\] must be"),
    ],
)
def test_manifest_values_of_the_wrong_type_are_named(ckpt, tmp_path, edit, message):
    _edit(ckpt, edit)
    with pytest.raises(ValueError, match=message) as err:
        open_checkpoint(str(ckpt), scratch=str(tmp_path / "scratch"))
    assert "manifest.json" in str(err.value)


def test_the_warning_for_an_unreadable_manifest_masks_a_secret_in_its_path(tmp_path, monkeypatch, caplog):
    secret = "s3cr3t-value-1234"
    monkeypatch.setenv("FUZZ_API_TOKEN", secret)
    _one_checkpoint(tmp_path / secret)
    ckpt = tmp_path / secret / "ckpts" / "ep0-ba1"
    (ckpt / "manifest.json").write_text("[]")
    with caplog.at_level(logging.WARNING, logger="foundry.checkpoint.layout"):
        assert find_checkpoints(CheckpointStore(str(ckpt.parent)), scratch=str(tmp_path / "scratch")) == []
    assert "ignoring checkpoint" in caplog.text and secret not in caplog.text
