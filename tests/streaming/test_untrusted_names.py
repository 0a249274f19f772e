"""Crafted names in ``index.json``, merge inputs and listings never reach outside their folder.

Each crafted dataset is written with the real writer, then its ``index.json`` is edited so one basename is
``..``-relative, absolute or otherwise unsafe. A valid copy of the shard is planted where the name points, so a
reader that followed the name would succeed: the tests assert the clear error (naming ``index.json``, the field
and the value) and that the planted file is untouched and nothing new appeared outside the root.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from streaming import LocalDataset, MDSWriter, StreamingDataset, merge_index
from streaming.format.index import FileInfo, load_index
from streaming.storage import download_file, list_files, upload_file
from streaming.tools.cli import main
from streaming.util.safepath import UnsafePathError

N = 40
RELATIVE_BAD = ["../../evil.mds", "a/../../evil.mds", "C:evil", "..\\evil"]


def _bad_names(tmp_path: Path) -> list[str]:
    return [*RELATIVE_BAD, str(tmp_path / "abs" / "evil.mds")]


def _write(out: Path | str, *, compression: str | None = None) -> None:
    with MDSWriter(out=str(out), columns={"x": "int"}, size_limit=200, compression=compression) as w:
        for i in range(N):
            w.write({"x": i})


def _dataset(tmp_path: Path, *, compression: str | None = None) -> Path:
    ds = tmp_path / "outer" / "mid" / "ds"
    _write(ds, compression=compression)
    return ds


def _rename(ds: Path, name: str, *, shard: int = 0, key: str = "raw_data") -> str:
    """Set ``shards[shard].<key>.basename`` of ``ds/index.json`` to ``name``; return the old basename."""
    index_file = ds / "index.json"
    index = json.loads(index_file.read_text())
    entry = index["shards"][shard][key]
    old, entry["basename"] = entry["basename"], name
    index_file.write_text(json.dumps(index, sort_keys=True))
    return old


def _poison(ds: Path, name: str, *, shard: int = 0, key: str = "raw_data") -> Path:
    """``_rename``, and plant a valid copy of the renamed file where ``name`` points."""
    target = Path(os.path.normpath(os.path.join(ds, name)))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ds / _rename(ds, name, shard=shard, key=key), target)
    return target


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: file contents, ``None`` for folders."""
    return {str(p): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def _assert_named(err: BaseException, index_name: str, field: str, value: str) -> None:
    msg = str(err)
    assert index_name in msg and field in msg and repr(value) in msg, msg


# ---------------------------------------------------------------- local folders


@pytest.mark.parametrize("which", range(5))
@pytest.mark.parametrize(("key", "shard", "compression"), [("raw_data", 0, None), ("zip_data", 1, "zstd")])
def test_local_dataset_refuses_unsafe_basename(tmp_path, which, key, shard, compression):
    ds = _dataset(tmp_path, compression=compression)
    name = _bad_names(tmp_path)[which]
    target = _poison(ds, name, shard=shard, key=key)
    before = _tree(tmp_path)
    with pytest.raises(UnsafePathError) as err:
        LocalDataset(str(ds))
    _assert_named(err.value, str(ds / "index.json"), f"shards[{shard}].{key}.basename", name)
    assert _tree(tmp_path) == before and target.exists()


@pytest.mark.parametrize("which", range(5))
def test_streaming_dataset_local_refuses_unsafe_basename(tmp_path, which):
    ds = _dataset(tmp_path, compression="zstd")
    name = _bad_names(tmp_path)[which]
    _poison(ds, name, key="zip_data")  # the raw file is absent: a follower would decompress the planted copy
    before = _tree(tmp_path)
    with pytest.raises(UnsafePathError) as err:
        StreamingDataset(local=str(ds), batch_size=4)
    _assert_named(err.value, "index.json", "shards[0].zip_data.basename", name)
    assert _tree(tmp_path) == before


def test_file_info_never_holds_an_unsafe_name():
    with pytest.raises(UnsafePathError):
        FileInfo(basename="../x.mds", bytes=1)
    with pytest.raises(UnsafePathError):
        FileInfo(basename="/etc/passwd", bytes=1)


def test_safe_names_are_normalised(tmp_path):
    ds = _dataset(tmp_path)
    index = json.loads((ds / "index.json").read_text())
    index["shards"][0]["raw_data"]["basename"] = "./" + index["shards"][0]["raw_data"]["basename"]
    (ds / "index.json").write_text(json.dumps(index))
    assert not load_index(str(ds)).shards[0].raw_data.basename.startswith(".")
    assert [s["x"] for s in LocalDataset(str(ds))] == list(range(N))


def test_download_refuses_a_destination_outside_its_root(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"payload")
    root = tmp_path / "root"
    with pytest.raises(UnsafePathError, match="outside its folder"):
        download_file(str(src), str(root / ".." / "escaped" / "x"), root=str(root))
    assert not (tmp_path / "escaped").exists() and not root.exists()


# ---------------------------------------------------------------- loopback S3


def _upload_dir(local: Path, remote: str) -> None:
    for path in sorted(local.rglob("*")):
        if path.is_file():
            upload_file(str(path), f"{remote}/{path.relative_to(local).as_posix()}")


@pytest.mark.parametrize("which", range(5))
def test_remote_stream_refuses_unsafe_basename_before_any_download(s3_bucket, tmp_path, which):
    src = tmp_path / "src"
    _write(src)
    name = _bad_names(tmp_path)[which]
    _rename(src, name)
    remote = f"{s3_bucket}/ds"
    _upload_dir(src, remote)
    if name.startswith("/"):  # the object a follower of the absolute name would fetch and write to that path
        upload_file(str(src / "shard.00001.mds"), f"{remote}/{name.lstrip('/')}")
    cache = tmp_path / "c1" / "c2" / "cache"
    before = _tree(tmp_path)
    with pytest.raises(UnsafePathError) as err:
        ds = StreamingDataset(remote=remote, local=str(cache), batch_size=4)
        list(ds)
    _assert_named(err.value, f"{remote}/index.json", "shards[0].raw_data.basename", name)
    new = set(_tree(tmp_path)) - set(before)
    assert all(Path(p) == tmp_path / "c1" or tmp_path / "c1" in Path(p).parents for p in new), new
    new_files = {p for p in new if Path(p).is_file() and not any(q.endswith(".locks") for q in Path(p).parts)}
    assert new_files == {str(cache / "index.json")}, "only the index was fetched"
    assert not Path(os.path.normpath(os.path.join(cache, name))).exists()


def test_cache_limit_eviction_never_deletes_outside_the_cache(s3_bucket, tmp_path):
    src = _dataset(tmp_path / "src")
    cache = tmp_path / "cache"
    name = "../victim.mds"
    remote = f"{s3_bucket}/ds"
    index = json.loads((src / "index.json").read_text())
    index["shards"][0]["raw_data"]["basename"] = name
    (src / "index.json").write_text(json.dumps(index, sort_keys=True))
    victim = tmp_path / "victim.mds"  # what eviction of shard 0 would delete: the cache's parent's file
    shutil.copyfile(src / "shard.00000.mds", victim)
    _upload_dir(src, remote)
    largest = max(sh["raw_data"]["bytes"] for sh in index["shards"])
    with pytest.raises(UnsafePathError) as err:
        ds = StreamingDataset(remote=remote, local=str(cache), batch_size=4, cache_limit=4 * largest)
        list(ds)
    _assert_named(err.value, "index.json", "shards[0].raw_data.basename", name)
    assert victim.read_bytes() == (src / "shard.00000.mds").read_bytes()


# ---------------------------------------------------------------- python -m streaming


@pytest.mark.parametrize("which", range(5))
def test_cli_validate_local_reports_unsafe_basename(tmp_path, capsys, which):
    ds = _dataset(tmp_path)
    name = _bad_names(tmp_path)[which]
    _poison(ds, name)
    assert main(["validate", str(ds)]) == 1
    err = capsys.readouterr().err
    assert "index.json" in err and "shards[0].raw_data.basename" in err and repr(name) in err


def test_cli_validate_remote_writes_nothing_outside(s3_bucket, tmp_path, capsys):
    src = _dataset(tmp_path / "src")
    name = str(tmp_path / "abs" / "evil.mds")
    _rename(src, name)
    remote = f"{s3_bucket}/ds"
    _upload_dir(src, remote)
    upload_file(str(src / "shard.00001.mds"), f"{remote}/{name.lstrip('/')}")
    assert main(["validate", remote]) == 1
    err = capsys.readouterr().err
    assert f"{remote}/index.json" in err and "shards[0].raw_data.basename" in err and repr(name) in err
    assert not (tmp_path / "abs").exists()


def test_cli_rebuild_index_remote_uses_only_plain_shard_names(s3_bucket, tmp_path):
    src = tmp_path / "src"
    _write(src)
    remote = f"{s3_bucket}/ds"
    _upload_dir(src, remote)
    # Listed objects whose names are not plain shard names: nested, or shard-like with odd characters.
    upload_file(str(src / "shard.00000.mds"), f"{remote}/sub/shard.00099.mds")
    upload_file(str(src / "shard.00000.mds"), f"{remote}/shard.00098.mds..\\evil")
    upload_file(str(src / "shard.00000.mds"), f"{remote}/shard.x")
    assert main(["rebuild-index", remote, "--force"]) == 0
    local = tmp_path / "check"
    download_file(f"{remote}/index.json", str(local / "index.json"))
    names = [sh.raw_data.basename for sh in load_index(str(local)).shards]
    assert names == sorted(p.name for p in src.glob("shard.*.mds"))


def test_cli_rebuild_index_local_ignores_nested_and_odd_names(tmp_path):
    ds = tmp_path / "ds"
    _write(ds)
    original = load_index(str(ds)).to_json()
    (ds / "index.json").unlink()
    (ds / "sub").mkdir()
    shutil.copyfile(ds / "shard.00000.mds", ds / "sub" / "shard.00099.mds")
    shutil.copyfile(ds / "shard.00000.mds", ds / "shard.00098.mds..\\evil")
    assert main(["rebuild-index", str(ds)]) == 0
    assert load_index(str(ds)).to_json() == original


# ---------------------------------------------------------------- merge_index


def _partitions(root: Path, parts: int = 3) -> None:
    for p in range(parts):
        with MDSWriter(out=str(root / str(p)), columns={"x": "int"}, size_limit=150) as w:
            for i in range(5):
                w.write({"x": p * 100 + i})


@pytest.mark.parametrize(
    "name", ["../../evil.mds", "/abs/evil.mds", "a/../../evil.mds", "C:evil", "..\\evil"]
)
def test_merge_refuses_unsafe_basename_in_a_partition(tmp_path, name):
    root = tmp_path / "root"
    _partitions(root)
    index_file = root / "1" / "index.json"
    _rename(root / "1", name)
    with pytest.raises(UnsafePathError) as err:
        merge_index(str(root))
    _assert_named(err.value, str(index_file), "shards[0].raw_data.basename", name)
    assert not (root / "index.json").exists()


def test_merge_refuses_unsafe_partition_folder(tmp_path):
    root = tmp_path / "root"
    _partitions(root, parts=1)
    (root / "0" / "sub").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    path = f"{root}/0/sub/../index.json"  # the folder holding this index is named '..'
    with pytest.raises(UnsafePathError, match="partition folder='..'"):
        merge_index([path], str(out))
    assert not (out / "index.json").exists()


def test_merge_remote_refuses_unsafe_basename(s3_bucket, tmp_path):
    root = tmp_path / "root"
    _partitions(root, parts=2)
    _rename(root / "1", "../../evil.mds")
    remote = f"{s3_bucket}/ds"
    _upload_dir(root, remote)
    with pytest.raises(UnsafePathError) as err:
        merge_index(remote)
    _assert_named(err.value, f"{remote}/1/index.json", "shards[0].raw_data.basename", "../../evil.mds")
    assert f"{remote}/index.json" not in list_files(f"{remote}/")
