"""The offline quick-start corpus, tokenizer and MDS cache: keyed builds, never changed once published."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foundry.data.quickstart import (
    QuickstartDataConfig,
    prepare_quickstart,
    quickstart_corpus,
    quickstart_tokenizer_path,
)

REPO = Path(__file__).resolve().parents[3]


def test_corpus_is_deterministic_and_capped():
    a, b = quickstart_corpus(200_000), quickstart_corpus(200_000)
    assert a == b and sum(map(len, a)) == 200_000
    assert "The" in a[0]  # pydoc topics: English reference text first


def _snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_prepare_builds_once_then_reuses(tmp_path):
    from streaming import LocalDataset

    cfg = QuickstartDataConfig(local=str(tmp_path / "qs"), corpus_mb=0.15, vocab_size=300)
    root = prepare_quickstart(cfg, max_seq_len=32)
    assert root.parent == tmp_path / "qs" and root.name.startswith("data-")
    assert (root / "tokenizer.json").read_bytes() == Path(
        quickstart_tokenizer_path(cfg.local, 0.15, 300)
    ).read_bytes()
    train, val = LocalDataset(str(root), "train"), LocalDataset(str(root), "val")
    assert len(train) > len(val) > 0
    assert train[0]["tokens"].max() < 300 and train[0]["tokens"].shape == (32,)
    before = _snapshot(root)
    assert prepare_quickstart(cfg, max_seq_len=32) == root
    assert _snapshot(root) == before
    assert json.loads((root / "quickstart.json").read_text())["max_seq_len"] == 32
    assert not list((tmp_path / "qs").glob(".tmp-*"))  # no temp folders left


def test_a_different_max_seq_len_gets_its_own_folder_and_leaves_the_first_untouched(tmp_path):
    """The issue: `model.max_seq_len=256` in a second terminal rebuilt the running quick start's data in place."""
    from streaming import LocalDataset

    cfg = QuickstartDataConfig(local=str(tmp_path / "qs"), corpus_mb=0.15, vocab_size=300)
    first = prepare_quickstart(cfg, max_seq_len=32)
    tokenizer = Path(quickstart_tokenizer_path(cfg.local, 0.15, 300))
    before, tok_before = _snapshot(first), _snapshot(tokenizer.parent)
    second = prepare_quickstart(cfg, max_seq_len=16)
    assert second != first and second.parent == first.parent
    assert LocalDataset(str(second), "train")[0]["tokens"].shape == (16,)
    assert _snapshot(first) == before  # not rebuilt, not touched
    assert _snapshot(tokenizer.parent) == tok_before  # the tokenizer is shared, not retrained
    assert LocalDataset(str(first), "train")[0]["tokens"].shape == (32,)
    other_vocab = QuickstartDataConfig(local=cfg.local, corpus_mb=0.15, vocab_size=280)
    assert quickstart_tokenizer_path(cfg.local, 0.15, 280) != str(tokenizer)
    assert prepare_quickstart(other_vocab, max_seq_len=32) not in (first, second)


BUILDER = """
import logging, sys, time
from pathlib import Path
from foundry.data.quickstart import QuickstartDataConfig, prepare_quickstart
logging.basicConfig(level=logging.INFO, format="%(message)s")
go = Path(sys.argv[2])
Path(sys.argv[3]).touch()
while not go.exists():
    time.sleep(0.01)
cfg = QuickstartDataConfig(local=sys.argv[1], corpus_mb=0.1, vocab_size=290)
print("RESULT", prepare_quickstart(cfg, max_seq_len=32), flush=True)
"""


@pytest.mark.slow  # ~8 s: two interpreters; the lock itself is tested fast in test_build_cache.py
def test_two_processes_building_one_key_at_once_share_a_single_build(tmp_path):
    cache, go = tmp_path / "qs", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILDER, str(cache), str(go), str(tmp_path / f"ready{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)):  # both imported: start them together
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.02)
    go.touch()
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    results = {line for out, _ in outs for line in out.splitlines() if line.startswith("RESULT")}
    assert len(results) == 1, outs  # both got the same published folder
    logs = "".join(err for _, err in outs)
    assert logs.count("trained a byte-level BPE tokenizer") == 1, logs  # built once
    assert logs.count("quick start: building the MDS splits") == 1, logs
    (data,) = cache.glob("data-*")
    assert results == {f"RESULT {data}"}
    assert not list(cache.glob(".tmp-*"))


def test_the_tokenizer_path_needs_a_cache_folder():
    with pytest.raises(ValueError, match="set tokenizer.name"):
        quickstart_tokenizer_path(None)


def test_only_rank_zero_prints_the_quick_start_lines(tmp_path, monkeypatch, caplog):
    """Issue 26 item 13: every torchrun rank printed the same quick-start lines."""
    import logging

    cfg = QuickstartDataConfig(local=str(tmp_path / "qs"), corpus_mb=0.1, vocab_size=290)
    with caplog.at_level(logging.INFO, logger="foundry.data"):
        monkeypatch.setenv("RANK", "1")
        prepare_quickstart(cfg, max_seq_len=32)
        assert not [r for r in caplog.records if "quick start" in r.getMessage()]
        monkeypatch.setenv("RANK", "0")
        prepare_quickstart(cfg, max_seq_len=32)
        assert any("quick start: reusing" in r.getMessage() for r in caplog.records)
