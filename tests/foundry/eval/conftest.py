"""Fixtures for the ICL evaluation tests: a tiny byte-level BPE tokenizer (no shared data) and tiny models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from foundry.data.quickstart import train_bpe_tokenizer
from foundry.eval.synthetic import OFFLINE_TASKS, generate_offline
from foundry.models import MPTModelConfig, build_model
from foundry.tokenizers import TokenizerConfig, build_tokenizer


@pytest.fixture(scope="session")
def icl_tokenizer(tmp_path_factory: pytest.TempPathFactory):
    """A GPT-2-style byte-level BPE (" a" is one token) trained on the offline tasks' text, ~300 tokens."""
    docs = []
    for name in OFFLINE_TASKS:
        for row in generate_offline(name, n=100):
            docs.append(" ".join(str(v) for v in row.values()))
    docs += ["Question: the cat sat on the mat. Answer: yes no maybe"] * 20
    path = Path(tmp_path_factory.mktemp("tok")) / "tokenizer.json"
    train_bpe_tokenizer(docs, vocab_size=300, path=path)
    return build_tokenizer(TokenizerConfig(name=str(path)))


def tiny_mpt(vocab: int = 320, *, seed: int = 0, **attn: object) -> torch.nn.Module:
    """A 2-layer MPT (learned positions unless `alibi=True` / `rope=True`)."""
    torch.manual_seed(seed)
    attn_config = {"attn_impl": "torch", **attn}
    learned = not (attn.get("alibi") or attn.get("rope"))
    cfg = MPTModelConfig(
        d_model=32, n_heads=4, n_layers=2, max_seq_len=256, vocab_size=vocab, attn_config=attn_config,
        learned_pos_emb=learned,
    )  # fmt: skip
    return build_model(cfg).eval()


@pytest.fixture(scope="session")
def icl_model():
    return tiny_mpt()
