"""Composer checkpoints from where Composer leaves them: compressed by its `zstd`/`lz4` pipes (`.pt.zst`,
`.pt.lz4`, with bounded inflation) and in an object store (`s3://...`, a file or a sharded folder, read through
the storage layer from the loopback S3 server)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from foundry.compat.composer import is_composer_checkpoint, load_pt, read_composer_checkpoint, to_foundry
from foundry.compat.composer.convert import as_foundry_start
from foundry.errors import run_tool
from stackbase.bounded import TooLarge
from tests.foundry.compat.test_composer_checkpoint import _model_and_optimizer, composer_state

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def composer_pt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, opt = _model_and_optimizer()
    path = tmp_path_factory.mktemp("composer-src") / "ep0-ba5-rank0.pt"
    torch.save(composer_state(model, opt), path)
    return path


def _cli(tool: str, src: Path, dst: Path) -> Path:
    """Compresses as Composer does (its `CliCompressor` pipes the checkpoint through the tool's CLI)."""
    if shutil.which(tool) is None:
        pytest.skip(f"the {tool} command is not installed")
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        subprocess.run([tool, "-c", "-q"], stdin=fin, stdout=fout, check=True)
    return dst


def _same_weights(a: Path | str, b: Path | str) -> None:
    x, y = read_composer_checkpoint(str(a)), read_composer_checkpoint(str(b))
    assert x.model.keys() == y.model.keys() and all(torch.equal(x.model[k], y.model[k]) for k in x.model)
    assert x.counters == y.counters and x.optimizer is not None and y.optimizer is not None


def test_zst_checkpoint_reads_like_the_pt(composer_pt: Path, tmp_path: Path) -> None:
    zst = _cli("zstd", composer_pt, tmp_path / "ep0-ba5-rank0.pt.zst")
    assert is_composer_checkpoint(str(zst))
    _same_weights(composer_pt, zst)
    where, what = to_foundry(str(zst), str(tmp_path / "ours"))
    assert what.startswith("step 5, epoch 0; model, DecoupledAdamW") and os.path.isdir(where)


def test_lz4_checkpoint_reads_or_names_the_package(composer_pt: Path, tmp_path: Path) -> None:
    lz4 = _cli("lz4", composer_pt, tmp_path / "ep0-ba5-rank0.pt.lz4")
    assert is_composer_checkpoint(str(lz4))
    if importlib.util.find_spec("lz4") is not None:
        _same_weights(composer_pt, lz4)
    else:
        with pytest.raises(ValueError, match=r"install the lz4 package .*pip install lz4"):
            load_pt(str(lz4))


def test_lz4_without_the_package_is_one_error_line(
    composer_pt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lz4 = _cli("lz4", composer_pt, tmp_path / "ck.pt.lz4")
    monkeypatch.setitem(sys.modules, "lz4", None)  # as on a machine without it (import raises ImportError)
    monkeypatch.setitem(sys.modules, "lz4.frame", None)
    script = _script()
    code = run_tool(lambda: script.main(["--from", "composer", str(lz4), str(tmp_path / "out")]))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and "pip install lz4" in err[0]


def test_a_zstd_bomb_is_refused_before_it_fills_the_disk(tmp_path: Path, monkeypatch) -> None:
    import zstandard

    bomb = tmp_path / "bomb.pt.zst"
    zeros = bytes(8 << 20)  # 8 MiB of zeros: a few hundred bytes compressed, far over the ratio
    bomb.write_bytes(zstandard.ZstdCompressor().compress(b"PK\x03\x04" + zeros))
    with pytest.raises(TooLarge, match=r"decompression bomb.*FOUNDRY_MAX_ZIP_RATIO"):
        load_pt(str(bomb))
    monkeypatch.setenv("FOUNDRY_MAX_ZIP_RATIO", str(1 << 20))  # trusted: allowed, then it is no torch zip
    with pytest.raises(ValueError, match="not a zip-format torch file"):
        load_pt(str(bomb))


def test_a_truncated_zst_is_one_value_error(composer_pt: Path, tmp_path: Path) -> None:
    zst = _cli("zstd", composer_pt, tmp_path / "ck.pt.zst")
    cut = tmp_path / "cut.pt.zst"
    cut.write_bytes(zst.read_bytes()[: zst.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"cut.pt.zst"):
        load_pt(str(cut))


def _script():
    spec = importlib.util.spec_from_file_location(
        "convert_checkpoint", REPO / "scripts/convert_checkpoint.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _upload(local: Path, url: str) -> None:
    from foundry.checkpoint.store import CheckpointStore

    parent, _, name = url.rpartition("/")
    store = CheckpointStore(parent)
    if local.is_dir():
        for f in sorted(local.rglob("*")):
            if f.is_file():
                store.put(str(f), f"{name}/{f.relative_to(local)}")
    else:
        store.put(str(local), name)


def test_composer_file_in_s3_converts_and_starts_a_run(composer_pt: Path, tmp_path: Path, s3_bucket) -> None:
    zst = _cli("zstd", composer_pt, tmp_path / "ep0-ba5-rank0.pt.zst")
    url = f"{s3_bucket}/composer/ep0-ba5-rank0.pt.zst"
    _upload(zst, url)
    assert is_composer_checkpoint(url) and not is_composer_checkpoint(f"{s3_bucket}/ours/ep0-ba5")
    where, what = to_foundry(url, f"{s3_bucket}/ours/ep0-ba5", work_dir=str(tmp_path))
    assert where == f"{s3_bucket}/ours/ep0-ba5" and what.startswith("step 5")
    start = as_foundry_start(url, scratch=str(tmp_path / "scratch"), weights_only=False, rank=0)
    got = read_composer_checkpoint(str(composer_pt))
    from foundry.checkpoint.state import MODEL_FILE

    weights = torch.load(os.path.join(start, MODEL_FILE), weights_only=True)
    assert all(torch.equal(weights[k], got.model[k]) for k in got.model)


def test_sharded_composer_folder_in_s3(composer_pt: Path, tmp_path: Path, s3_bucket, capsys) -> None:
    state = read_composer_checkpoint(str(composer_pt))
    folder = tmp_path / "ep0-ba5"
    dcp.save(  # Composer's sharded layout (one process): state.model.<model.name>, state.timestamp
        {
            "state": {
                "model": {f"model.{k}": v for k, v in state.model.items()},
                "timestamp": {"Timestamp": {"batch": 5, "epoch": 0, "sample": 10, "token": 80}},
            }
        },
        storage_writer=dcp.FileSystemWriter(str(folder)),
    )
    url = f"{s3_bucket}/composer/ep0-ba5"
    _upload(folder, url)
    script = _script()
    code = run_tool(lambda: script.main(["--from", "composer", "--weights-only", url, str(tmp_path / "out")]))
    assert code in (0, None), capsys.readouterr().err
    from foundry.checkpoint.state import MODEL_FILE

    weights = torch.load(tmp_path / "out" / MODEL_FILE, weights_only=True)
    assert all(torch.equal(weights[k], state.model[k]) for k in state.model)
    with pytest.raises(ValueError, match="no such file or folder"):
        to_foundry(f"{s3_bucket}/composer/missing.pt", str(tmp_path / "x"), work_dir=str(tmp_path))
