"""The lock folder lives outside the cache folder, found the same way by every job sharing that folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from streaming import MDSWriter, StreamingDataset
from streaming.cache.locks import file_lock, lock_dir, try_lock
from streaming.util.safepath import UnsafePathError


def _write(out: Path, n: int = 40) -> None:
    with MDSWriter(out=str(out), columns={"x": "int"}, size_limit=1 << 7, hashes=["xxh64"]) as w:
        for i in range(n):
            w.write({"x": i})


def test_the_cache_folder_lists_exactly_the_remote_files(tmp_path: Path) -> None:
    remote, local = tmp_path / "remote", tmp_path / "local"
    _write(remote)
    ds = StreamingDataset(remote=str(remote), local=str(local), batch_size=4, validate_hash="xxh64")
    assert [s["x"] for s in ds] == list(range(40))
    assert sorted(os.listdir(local)) == sorted(os.listdir(remote))
    assert lock_dir(str(local)) == str(tmp_path / ".local.locks")


def test_every_path_to_one_folder_finds_the_same_locks(tmp_path: Path) -> None:
    real = tmp_path / "cache"
    real.mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(real)
    assert lock_dir(str(alias)) == lock_dir(str(real)) == lock_dir(str(real) + "/")
    with file_lock(str(real), "shard.00000.mds"), try_lock(str(alias), "shard.00000.mds") as got:
        assert not got, "the lock taken through one path is seen through the other"


def test_a_read_only_parent_puts_the_locks_in_the_runtime_folder(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "ro" / "cache").mkdir(parents=True)
    runtime = tmp_path / "run"
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    real_makedirs = os.makedirs

    def read_only_parent(path, *args, **kwargs):
        if os.fspath(path).startswith(str(tmp_path / "ro")):
            raise PermissionError(13, "Permission denied", path)
        return real_makedirs(path, *args, **kwargs)

    monkeypatch.setattr(os, "makedirs", read_only_parent)
    cache = str(tmp_path / "ro" / "cache")
    folder = lock_dir(cache)
    assert folder.startswith(str(runtime / "streaming-locks") + os.sep)
    assert folder == lock_dir(cache), "deterministic"
    assert folder != lock_dir(str(tmp_path / "run")), "one lock folder per cache folder"
    with file_lock(cache, "index.json"):
        pass
    assert os.listdir(tmp_path / "ro") == ["cache"]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder owned by another user needs root")
def test_a_lock_folder_planted_by_another_user_is_not_used(tmp_path: Path, monkeypatch) -> None:
    """In a shared parent (``/tmp``) another user may create ``.<name>.locks`` first: it could hold forged hash
    verdicts, so the locks go to this user's runtime folder instead."""
    local = tmp_path / "cache"
    local.mkdir()
    planted = tmp_path / ".cache.locks"
    planted.mkdir()
    os.chown(planted, 4242, 4242)
    os.chown(local, os.geteuid(), os.getegid())
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    (tmp_path / "runtime").mkdir()
    assert lock_dir(str(local)) != str(planted)
    assert lock_dir(str(local)).startswith(str(tmp_path / "runtime"))


def test_the_lock_folder_is_resolved_once_and_again_when_it_changes(tmp_path: Path, monkeypatch) -> None:
    """Each lock a preparation, pin or eviction takes asked for the lock folder (~70 us: real path, link check,
    makedirs, owner); it is resolved once per process now, and again when the folder is not the one resolved."""
    cache = tmp_path / "cache"
    cache.mkdir()
    folder = lock_dir(str(cache))
    resolved: list[str] = []
    real_realpath = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda p, **kw: resolved.append(p) or real_realpath(p, **kw))
    for _ in range(3):
        with file_lock(str(cache), "shard.00000.mds"):
            pass
    assert lock_dir(str(cache)) == folder and resolved == []
    shutil.rmtree(folder)  # removed (the cache cleared by hand): made again, found again
    assert lock_dir(str(cache)) == folder and os.path.isdir(folder) and resolved == [str(cache)]
    shutil.rmtree(folder)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", folder)  # a link planted in its place is refused, as on first use
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        lock_dir(str(cache))
