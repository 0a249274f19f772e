"""A gpt-neox-20b tokenizer as llm-foundry's smoke script loads it (<|endoftext|> as bos/eos, no pad)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def neox(neox_tokenizer_path: Path):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_file=str(neox_tokenizer_path),
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
