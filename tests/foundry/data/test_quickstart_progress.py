"""The quick-start data build says what it is doing (it takes ~15 s on first use): one log line per stage."""

from __future__ import annotations

import logging

from foundry.data.quickstart import QuickstartDataConfig, prepare_quickstart


def test_build_and_reuse_log_progress_lines(tmp_path, caplog):
    cfg = QuickstartDataConfig(local=str(tmp_path / "qs"), corpus_mb=0.05, vocab_size=280)
    with caplog.at_level(logging.INFO, logger="foundry.data.quickstart"):
        data = prepare_quickstart(cfg, max_seq_len=32)
    lines = [r.getMessage() for r in caplog.records]
    assert any("building the corpus and tokenizer" in m for m in lines), lines
    assert any("building the MDS splits" in m and "max_seq_len=32" in m for m in lines), lines
    assert any("corpus of" in m and "documents" in m for m in lines), lines
    assert any("tokenizer" in m and "280 tokens" in m for m in lines), lines
    assert any("MDS split 'train'" in m and "rows of 32 tokens" in m for m in lines), lines
    assert any("MDS split 'val'" in m for m in lines), lines
    assert any("data ready" in m for m in lines), lines
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="foundry.data.quickstart"):
        prepare_quickstart(cfg, max_seq_len=32)
    assert [r.getMessage() for r in caplog.records] == [
        f"quick start: reusing the corpus, tokenizer and MDS splits in {data}"
    ]
