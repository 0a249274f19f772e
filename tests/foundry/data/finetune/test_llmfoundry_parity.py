"""Token-for-token comparison with llm-foundry's finetuning tokenization and masks (its venv, if installed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from foundry.data.finetune.masks import TargetPolicy
from foundry.data.finetune.tokenize import ExampleBuilder

REF_PYTHON = Path("/tmp/ref/venv-llmfoundry/bin/python")
SETTINGS = [
    (p, r, n)
    for p in ("none", "all", "length>=4", "length>=40")
    for r in ("last", "all")
    for n in (8, 24, 512)
]
CHAT = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
    {"role": "tool", "content": "lookup: Rome"},
    {"role": "assistant", "content": "Rome."},
]
ROWS = [
    {"prompt": "Translate to French: cheese", "response": " fromage"},
    {"prompt": "Write a long story about a cat. " * 5, "completion": " Once upon a time there was a cat."},
    {"prompt": "q", "response": "answer ending in eos<|endoftext|>"},
    {"messages": CHAT},
    {"messages": CHAT[1:3]},
]


@pytest.mark.slow
def test_same_tokens_and_labels_as_llmfoundry(tmp_path, neox, neox_tokenizer_path):
    if not REF_PYTHON.exists():
        pytest.skip(f"llm-foundry venv not found at {REF_PYTHON} (../shared/bench/setup_llmfoundry.sh)")
    spec = tmp_path / "rows.json"
    spec.write_text(json.dumps({"rows": ROWS, "settings": SETTINGS}))
    out = tmp_path / "ref.json"
    script = Path(__file__).with_name("llmfoundry_masks.py")
    subprocess.run(
        [str(REF_PYTHON), str(script), str(spec), str(neox_tokenizer_path), str(out)],
        check=True,
        cwd=tmp_path,
        timeout=600,
    )
    ref = json.loads(out.read_text())
    checked = 0
    for r, row in enumerate(ROWS):
        for s, (prompts, responses, max_len) in enumerate(SETTINGS):
            builder = ExampleBuilder(
                tokenizer=neox, policy=TargetPolicy.parse(prompts, responses), max_seq_len=max_len
            )
            ours = builder(row, r)
            theirs = ref[r][s]
            where = f"row {r}, {prompts}/{responses}/{max_len}"
            assert (ours is not None) == theirs["valid"], where
            if ours is not None:
                assert list(ours.input_ids) == theirs["input_ids"], where
                assert list(ours.labels) == theirs["labels"], where
                checked += 1
    assert checked > len(ROWS) * len(SETTINGS) // 2
