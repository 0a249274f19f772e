"""The offline quick-start corpus, tokenizer and MDS cache."""

from __future__ import annotations

import json

from foundry.data.quickstart import QuickstartDataConfig, prepare_quickstart, quickstart_corpus


def test_corpus_is_deterministic_and_capped():
    a, b = quickstart_corpus(200_000), quickstart_corpus(200_000)
    assert a == b and sum(map(len, a)) == 200_000
    assert "The" in a[0]  # pydoc topics: English reference text first


def test_prepare_builds_once_then_reuses(tmp_path):
    from streaming import LocalDataset

    cfg = QuickstartDataConfig(local=str(tmp_path / "qs"), corpus_mb=0.15, vocab_size=300)
    root = prepare_quickstart(cfg, max_seq_len=32)
    assert (root / "tokenizer.json").is_file()
    train, val = LocalDataset(str(root), "train"), LocalDataset(str(root), "val")
    assert len(train) > len(val) > 0
    assert train[0]["tokens"].max() < 300 and train[0]["tokens"].shape == (32,)
    stamp = (root / "train" / "index.json").stat().st_mtime_ns
    prepare_quickstart(cfg, max_seq_len=32)
    assert (root / "train" / "index.json").stat().st_mtime_ns == stamp
    assert json.loads((root / "quickstart.json").read_text())["max_seq_len"] == 32
    prepare_quickstart(cfg, max_seq_len=16)  # a different row length rebuilds
    assert LocalDataset(str(root), "train")[0]["tokens"].shape == (16,)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left
