"""Shards are prepared ahead of use: the first sample waits only for its own shard's decompression."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from streaming import MDSWriter
from streaming import stream as stream_module
from streaming.dataset import StreamingDataset
from streaming.format.index import ShardInfo


def test_first_sample_waits_only_for_its_own_shard(tmp_path, monkeypatch):
    path = str(tmp_path / "z")
    with MDSWriter(out=path, columns={"id": "int", "s": "str"}, size_limit=200, compression="zstd") as w:
        for k in range(200):
            w.write({"id": k, "s": f"x{k}"})
    shards = [f for f in os.listdir(path) if f.endswith(".mds.zstd")]
    assert len(shards) > 10
    real = stream_module.decompress_shard
    done: list[str] = []
    lock = threading.Lock()

    def slow_decompress(dirname: str, info: ShardInfo, **kwargs: Any) -> None:
        with lock:
            later = bool(started)
            started.append(info.raw_data.basename)
        if later:  # every shard after the first one takes a while
            time.sleep(0.05)
        real(dirname, info, **kwargs)
        with lock:
            done.append(info.raw_data.basename)

    started: list[str] = []
    monkeypatch.setattr(stream_module, "decompress_shard", slow_decompress)
    ds = StreamingDataset(local=path, batch_size=4, shuffle=True, predownload=64)
    it = iter(ds)
    first = next(it)
    # only the first sample's shard was started (not the whole first chunk's shards: they span several); the
    # sample may come from its raw file before that decompression has finished
    assert len(started) == 1 and len(done) <= 1
    ids = [first["id"]] + [s["id"] for s in it]
    assert sorted(ids) == list(range(200))
    assert sorted(done) == sorted(f.removesuffix(".zstd") for f in shards)  # each decompressed once


def test_pool_starts_after_the_first_sample(tmp_path, monkeypatch):
    """Pool threads compete with the reading thread once running: before the first sample is yielded only
    its own shard is prepared (by one pool thread, so the sample can be read from the front of its raw file
    while it is written); then the other shards are prepared in the background."""
    path = str(tmp_path / "z")
    with MDSWriter(out=path, columns={"id": "int"}, size_limit=200, compression="zstd") as w:
        for k in range(200):
            w.write({"id": k})
    real = stream_module.decompress_shard
    threads: list[str] = []
    lock = threading.Lock()

    def recording_decompress(dirname: str, info: ShardInfo, **kwargs: Any) -> None:
        with lock:
            threads.append(threading.current_thread().name)
        real(dirname, info, **kwargs)

    monkeypatch.setattr(stream_module, "decompress_shard", recording_decompress)
    ds = StreamingDataset(local=path, batch_size=4, shuffle=True, predownload=64)
    before = threading.active_count()
    it = iter(ds)
    ids = [next(it)["id"]]
    assert threading.active_count() <= before + 1
    assert len(threads) == 1 and threads[0] != threading.current_thread().name
    ids += [s["id"] for s in it]
    assert sorted(ids) == list(range(200))
    assert len(threads) == len(ds.shards)  # each shard once
    assert any(name != threading.current_thread().name for name in threads)  # prepared ahead, in the pool
