"""Checkpoints from untrusted sources: crafted manifest names never leave their folder, and a crafted sharded
checkpoint never runs code unless `checkpoint.allow_pickle=true`."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import BytesStorageMetadata

from foundry.checkpoint import CheckpointConfig, CheckpointStore, find_latest, load_weights, resolve_start
from foundry.checkpoint.convert import convert_checkpoint, to_hf
from foundry.checkpoint.layout import open_checkpoint
from foundry.checkpoint.resume import fetch
from foundry.checkpoint.safe_dcp import RestrictedReader, UnsafeCheckpointError
from foundry.models import build_model
from streaming.util.safepath import UnsafePathError
from tests.foundry.checkpoint.test_checkpointer import MODEL, _one_checkpoint

boto3 = pytest.importorskip("boto3")  # the s3 extra (a dev dependency); absent on bare GPU machines

ESCAPE = "escape.pt"
BAD_NAMES = [
    f"../../../../{ESCAPE}",
    f"model/../../../../../{ESCAPE}",
    f"./../../../../{ESCAPE}",
    f"..\\..\\..\\..\\{ESCAPE}",
    f"C:/{ESCAPE}",
    "./model.pt",  # not normalised: the rule takes names only in their normal form
]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _set_file(manifest: Path, name: str, data: bytes) -> None:
    """Lists `name` in `manifest` with the size and digest of `data` (so only our checks stand in the way)."""
    m = json.loads(manifest.read_text())
    m["files"][name] = {"bytes": len(data), "sha256": _sha(data)}
    manifest.write_text(json.dumps(m))


def _escaped(root: Path) -> list[Path]:
    return [p for p in root.rglob(ESCAPE)] + [p for p in Path("/").glob(ESCAPE)]


# ----------------------------------------------------------------------------- manifest names


@pytest.mark.parametrize("bad", [*BAD_NAMES, "ABSOLUTE"])
def test_local_manifest_with_an_unsafe_name_is_refused(tmp_path, bad):
    _one_checkpoint(tmp_path)
    bad = str(tmp_path / "abs" / ESCAPE) if bad == "ABSOLUTE" else bad
    ckpt = tmp_path / "ckpts" / "ep0-ba1"
    _set_file(ckpt / "manifest.json", bad, b"payload")
    model = build_model(MODEL)
    with pytest.raises(UnsafePathError, match="manifest.json") as err:
        load_weights(model, str(ckpt), cache_root=str(tmp_path / "a" / "b" / "cache"))
    assert repr(bad) in str(err.value) and "files=" in str(err.value)
    with pytest.raises(UnsafePathError, match="manifest.json"):  # discovery does not skip it silently
        resolve_start(
            CheckpointConfig(save_folder=str(tmp_path / "ckpts")), run_name="t", scratch=str(tmp_path)
        )
    assert not _escaped(tmp_path)


@pytest.mark.parametrize("bad", BAD_NAMES[:3])
def test_s3_manifest_with_an_unsafe_name_writes_nothing_outside_the_cache(tmp_path, s3_bucket, s3_env, bad):
    _one_checkpoint(tmp_path)
    local = tmp_path / "ckpts" / "ep0-ba1"
    _set_file(local / "manifest.json", bad, b"payload")
    bucket = s3_bucket.removeprefix("s3://")
    s3 = boto3.client("s3", endpoint_url=s3_env)
    for f in local.iterdir():
        s3.put_object(Bucket=bucket, Key=f"ckpts/ep0-ba1/{f.name}", Body=f.read_bytes())
    s3.put_object(Bucket=bucket, Key=f"ckpts/ep0-ba1/{bad}", Body=b"payload")  # what the old code fetched
    src = f"{s3_bucket}/ckpts/ep0-ba1"
    work = tmp_path / "a" / "b"
    with pytest.raises(UnsafePathError, match=r"ep0-ba1/manifest\.json.*files=") as err:
        load_weights(build_model(MODEL), src, cache_root=str(work / "cache"))
    assert repr(bad) in str(err.value)
    with pytest.raises(UnsafePathError, match="manifest.json"):
        convert_checkpoint(src, str(tmp_path / "out" / "ep0-ba1"), to="sharded", work_dir=str(work))
    with pytest.raises(UnsafePathError, match="manifest.json"):
        to_hf(src, str(tmp_path / "hf"))
    with pytest.raises(UnsafePathError, match="key="):  # the bucket listing holds the crafted key too
        find_latest(CheckpointStore(f"{s3_bucket}/ckpts"), scratch=str(tmp_path / "scratch"))
    assert not _escaped(tmp_path)
    assert not (tmp_path / "out").exists() and not (tmp_path / "hf").exists()


# ----------------------------------------------------------------------------- sharded checkpoints


class _OpenForWriting:
    """Unpickling this creates the file at `path` (what any code-running payload could do)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (open, (self.path, "w"))


class _System:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.path}",))


def _sharded(tmp_path: Path) -> Path:
    _one_checkpoint(tmp_path, fmt="sharded")
    return tmp_path / "ckpts" / "ep0-ba1"


def _replace_metadata(ckpt: Path, metadata: object) -> None:
    data = pickle.dumps(metadata)
    (ckpt / ".metadata").write_bytes(data)
    _set_file(ckpt / "manifest.json", ".metadata", data)


@pytest.mark.parametrize("payload", [_OpenForWriting, _System])
@pytest.mark.parametrize("entry", ["load_weights", "convert", "to_hf"])
def test_crafted_dcp_metadata_is_refused_and_runs_nothing(tmp_path, payload, entry):
    ckpt = _sharded(tmp_path)
    marker = tmp_path / "pwned"
    metadata = RestrictedReader(str(ckpt)).read_metadata()
    metadata.planner_data["evil"] = payload(str(marker))
    _replace_metadata(ckpt, metadata)
    with pytest.raises(UnsafeCheckpointError, match=r"\.metadata: refused to unpickle the global") as err:
        if entry == "load_weights":
            load_weights(build_model(MODEL), str(ckpt), cache_root=str(tmp_path / "cache"))
        elif entry == "convert":
            convert_checkpoint(str(ckpt), str(tmp_path / "out" / "ep0-ba1"), to="full")
        else:
            to_hf(str(ckpt), str(tmp_path / "hf"))
    assert "checkpoint.allow_pickle=true" in str(err.value)
    assert ("system" if payload is _System else "open") in str(err.value)
    assert not marker.exists()


def test_crafted_non_tensor_value_is_refused_and_runs_nothing(tmp_path):
    """DCP reads non-tensor values (`BYTE_IO`: optimizer hyperparameters) with full pickle: not here."""
    ckpt = _sharded(tmp_path)
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save(_OpenForWriting(str(marker)), buf)
    (ckpt / "__evil.distcp").write_bytes(buf.getvalue())
    _set_file(ckpt / "manifest.json", "__evil.distcp", buf.getvalue())
    metadata = RestrictedReader(str(ckpt)).read_metadata()
    key = next(k for k, v in metadata.state_dict_metadata.items() if isinstance(v, BytesStorageMetadata))
    index = next(i for i in metadata.storage_data if i.fqn == key)
    metadata.storage_data[index] = _StorageInfo(
        relative_path="__evil.distcp", offset=0, length=len(buf.getvalue())
    )
    _replace_metadata(ckpt, metadata)
    with pytest.raises(UnsafeCheckpointError, match=rf"{key}.*checkpoint\.allow_pickle=true"):
        convert_checkpoint(str(ckpt), str(tmp_path / "out" / "ep0-ba1"), to="full")
    assert not marker.exists()


def test_dcp_storage_path_outside_the_checkpoint_is_refused(tmp_path):
    ckpt = _sharded(tmp_path)
    metadata = RestrictedReader(str(ckpt)).read_metadata()
    index = next(iter(metadata.storage_data))
    info = metadata.storage_data[index]
    metadata.storage_data[index] = _StorageInfo("../../secret.distcp", info.offset, info.length)
    _replace_metadata(ckpt, metadata)
    with pytest.raises(UnsafePathError, match=r"relative_path='\.\./\.\./secret\.distcp'"):
        load_weights(build_model(MODEL), str(ckpt), cache_root=str(tmp_path / "cache"))


def test_modified_metadata_fails_its_digest_before_it_is_read(tmp_path):
    ckpt = _sharded(tmp_path)
    with open(ckpt / ".metadata", "ab") as f:
        f.write(b"\0")
    with pytest.raises(ValueError, match=r"\.metadata: does not match .*manifest\.json"):
        load_weights(build_model(MODEL), str(ckpt), cache_root=str(tmp_path / "cache"))


def test_genuine_sharded_checkpoint_loads_with_and_without_allow_pickle(tmp_path):
    tr = _one_checkpoint(tmp_path, fmt="sharded")
    ckpt = str(tmp_path / "ckpts" / "ep0-ba1")
    for allow in (False, True):
        model = build_model(MODEL)
        load_weights(model, ckpt, cache_root=str(tmp_path / "cache"), allow_pickle=allow)
        for k, v in tr.model.state_dict().items():
            assert torch.equal(model.state_dict()[k], v), k


def test_only_local_rank_zero_downloads_a_remote_checkpoint(tmp_path, s3_bucket, s3_env):
    """The node's downloader is the `local_rank` the task passes down (from its DistContext), not the
    environment: rank 1 of a node downloads nothing and waits for rank 0 (no process group here: no wait)."""
    _one_checkpoint(tmp_path)
    local = tmp_path / "ckpts" / "ep0-ba1"
    s3 = boto3.client("s3", endpoint_url=s3_env)
    for f in local.iterdir():
        s3.put_object(
            Bucket=s3_bucket.removeprefix("s3://"), Key=f"ckpts/ep0-ba1/{f.name}", Body=f.read_bytes()
        )
    info = open_checkpoint(f"{s3_bucket}/ckpts/ep0-ba1", scratch=str(tmp_path / "scratch"))
    os.environ["LOCAL_RANK"] = "0"  # ignored: the argument decides
    try:
        other = fetch(info, cache_root=str(tmp_path / "rank1"), local_rank=1)
    finally:
        del os.environ["LOCAL_RANK"]
    assert not os.path.exists(other) or not os.listdir(other)
    first = fetch(info, cache_root=str(tmp_path / "rank0"), local_rank=0)
    assert sorted(os.listdir(first)) == sorted(p.name for p in local.iterdir() if p.name != "manifest.json")


# ----------------------------------------------------------------------------- issue 27: corrupt or hostile


def test_a_hostile_checkpoint_is_a_fatal_user_error(tmp_path, capsys):
    """Exit 2 (one `error:` line), which the launcher does not restart: before, exit 1 and 4 loads of it."""
    from foundry.cli import EXIT_USER_ERROR, run_cli

    ckpt = _sharded(tmp_path)
    metadata = RestrictedReader(str(ckpt)).read_metadata()
    metadata.planner_data["evil"] = _System(str(tmp_path / "pwned"))
    _replace_metadata(ckpt, metadata)
    code = run_cli(lambda: load_weights(build_model(MODEL), str(ckpt), cache_root=str(tmp_path / "cache")))
    err = capsys.readouterr().err
    assert code == EXIT_USER_ERROR and err.startswith("error: ") and "Traceback" not in err
    assert not (tmp_path / "pwned").exists()


def test_a_manifest_nested_too_deeply_is_skipped_and_autoresume_falls_back(tmp_path, caplog):
    import logging
    import shutil

    _one_checkpoint(tmp_path)
    folder = tmp_path / "ckpts"
    shutil.copytree(folder / "ep0-ba1", folder / "ep0-ba2")
    (folder / "ep0-ba2" / "manifest.json").write_text("[" * 200_000 + "]" * 200_000)
    with caplog.at_level(logging.WARNING):
        latest = find_latest(CheckpointStore(str(folder)), scratch=str(tmp_path / "s"))
    assert latest is not None and latest.name == "ep0-ba1"
    assert any("ep0-ba2" in r.getMessage() and "nested too deeply" in r.getMessage() for r in caplog.records)
    start = resolve_start(
        CheckpointConfig(save_folder=str(folder)), run_name="t", scratch=str(tmp_path / "s")
    )
    assert start is not None and start.info.name == "ep0-ba1"


@pytest.mark.parametrize("script", ["convert_checkpoint", "export_hf"])
def test_scripts_refuse_a_pickled_weights_file_in_one_line(tmp_path, script):
    """Before: torch's unpickling error, advising `weights_only=False`."""
    import subprocess
    import sys

    _one_checkpoint(tmp_path)
    ckpt = tmp_path / "ckpts" / "ep0-ba1"
    buf = io.BytesIO()
    torch.save({"w": torch.ones(1), "evil": _System(str(tmp_path / "pwned"))}, buf)
    (ckpt / "model.pt").write_bytes(buf.getvalue())
    _set_file(ckpt / "manifest.json", "model.pt", buf.getvalue())
    repo = Path(__file__).resolve().parents[3]
    args = {
        "convert_checkpoint": ["--src", str(ckpt), "--dst", str(tmp_path / "out"), "--to", "sharded"],
        "export_hf": ["--src", str(ckpt), "--out", str(tmp_path / "hf")],
    }[script]
    proc = subprocess.run(
        [sys.executable, str(repo / "scripts" / f"{script}.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "refused" in lines[0], proc.stderr
    assert "weights_only=False" not in proc.stderr and not (tmp_path / "pwned").exists()


def test_a_manifest_over_the_json_cap_is_refused(tmp_path, monkeypatch):
    """SECURITY.md: checkpoint manifests are read with a size cap (FOUNDRY_MAX_JSON_MB)."""
    from stackbase.bounded import TooLarge

    _one_checkpoint(tmp_path)
    manifest = tmp_path / "ckpts" / "ep0-ba1" / "manifest.json"
    manifest.write_text(manifest.read_text() + " " * (1 << 20))
    monkeypatch.setenv("FOUNDRY_MAX_JSON_MB", "1")
    with pytest.raises(TooLarge, match=r"manifest.json: over 1,048,576 bytes"):
        CheckpointStore(str(tmp_path / "ckpts")).read_text(
            "ep0-ba1/manifest.json", scratch=str(tmp_path / "s")
        )
