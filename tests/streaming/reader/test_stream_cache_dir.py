"""The default cache of a remote stream: a per-user 0700 folder, never one that another user could fill."""

from __future__ import annotations

import os
import stat

import pytest

from streaming.reader.stream import Stream, UnsafeCacheDirError, default_cache_base, default_local


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("STREAMING_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def test_default_is_under_the_per_user_base_with_mode_0700(xdg):
    stream = Stream(remote="s3://bucket/ds", split="train")
    base = xdg / "streaming"
    assert os.path.dirname(stream.local) == str(base)
    assert stream.dirname == os.path.join(stream.local, "train")
    assert stat.S_IMODE(os.stat(base).st_mode) == 0o700
    assert not str(stream.local).startswith("/tmp/streaming")


def test_default_base_order(tmp_path, monkeypatch):
    monkeypatch.delenv("STREAMING_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_base() == str(tmp_path / "home" / ".cache" / "streaming")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_base() == str(tmp_path / "xdg" / "streaming")
    monkeypatch.setenv("STREAMING_CACHE", str(tmp_path / "mine"))
    assert default_cache_base() == str(tmp_path / "mine")
    local = Stream(remote="gs://b/ds").local
    assert os.path.dirname(local) == str(tmp_path / "mine")
    assert stat.S_IMODE(os.stat(tmp_path / "mine").st_mode) == 0o700


def test_distinct_remotes_and_splits_get_distinct_folders(xdg):
    a = default_local("s3://b/ds", None)
    assert a == default_local("s3://b/ds", None)
    assert len({a, default_local("s3://b/ds", "train"), default_local("s3://b/other", None)}) == 3


def test_local_paths_are_read_in_place(xdg, tmp_path):
    assert Stream(remote=str(tmp_path / "ds")).local == str(tmp_path / "ds")
    assert Stream(remote="s3://b/ds", local=str(tmp_path / "mine")).local == str(tmp_path / "mine")
    assert not xdg.exists(), "an explicit local (or a local remote) creates no default cache"


def test_planted_world_writable_stream_folder_is_refused(xdg):
    planted = default_local("s3://bucket/ds", None)
    os.makedirs(planted)
    (
        open(os.path.join(planted, "index.json"), "w")
    ).close()  # another user's index, served without a download
    os.chmod(planted, 0o777)
    with pytest.raises(UnsafeCacheDirError) as err:
        Stream(remote="s3://bucket/ds")
    msg = str(err.value)
    assert planted in msg and "local=" in msg and "writable by group or other users" in msg


def test_group_writable_base_is_refused(tmp_path, monkeypatch):
    base = tmp_path / "shared"
    base.mkdir()
    os.chmod(base, 0o775)
    monkeypatch.setenv("STREAMING_CACHE", str(base))
    with pytest.raises(UnsafeCacheDirError, match="writable by group or other users"):
        Stream(remote="s3://bucket/ds")


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="chown to another uid needs root")
def test_stream_folder_owned_by_another_user_is_refused(xdg):
    planted = default_local("s3://bucket/ds", None)
    os.makedirs(planted, mode=0o700)
    os.chown(planted, 12345, 12345)
    with pytest.raises(UnsafeCacheDirError, match="owned by uid 12345"):
        Stream(remote="s3://bucket/ds")


def test_own_private_folder_is_reused(xdg):
    first = Stream(remote="s3://bucket/ds").local
    os.makedirs(first)
    assert Stream(remote="s3://bucket/ds").local == first
