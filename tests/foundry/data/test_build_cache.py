"""Keyed build folders: one build per key, published whole by a rename, concurrent builders wait for it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from foundry.data.build_cache import build_key, publish_once


def test_build_key_depends_on_every_value_and_not_on_key_order():
    a = build_key({"max_seq_len": 128, "vocab_size": 512})
    assert a == build_key({"vocab_size": 512, "max_seq_len": 128}) and len(a) == 12
    assert a != build_key({"max_seq_len": 256, "vocab_size": 512})


def test_concurrent_builders_of_one_key_wait_for_a_single_build(tmp_path):
    calls: list[int] = []

    def build(folder: Path) -> None:
        calls.append(1)
        time.sleep(0.3)  # long enough for the other thread to find the lock taken
        (folder / "x").write_text("done")

    results: list[tuple[Path, bool]] = []
    start = threading.Barrier(2)

    def worker() -> None:
        start.wait()
        results.append(publish_once(tmp_path, "k", build=build, what="test"))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert {r[0] for r in results} == {tmp_path / "k"} and sorted(r[1] for r in results) == [False, True]
    assert (tmp_path / "k" / "x").read_text() == "done"


def test_a_failed_build_publishes_nothing_and_the_next_builder_starts_clean(tmp_path):
    def broken(folder: Path) -> None:
        (folder / "half").write_text("x")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        publish_once(tmp_path, "k", build=broken, what="test")
    assert not (tmp_path / "k").exists()
    (tmp_path / ".tmp-k-dead").mkdir()  # left by a builder killed mid-build
    folder, built = publish_once(tmp_path, "k", build=lambda f: (f / "ok").touch(), what="test")
    assert built and sorted(p.name for p in folder.iterdir()) == ["ok"]
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_published_folder_is_reused_as_it_is(tmp_path):
    publish_once(tmp_path, "k", build=lambda f: (f / "a").write_text("1"), what="test")
    folder, built = publish_once(tmp_path, "k", build=lambda f: (f / "a").write_text("2"), what="test")
    assert not built and (folder / "a").read_text() == "1"
