"""Prompt construction, token for token, against hand-written prompt strings (llm-foundry's layout)."""

from __future__ import annotations

import random

import pytest

from foundry.eval.config import ICLTaskConfig
from foundry.eval.prompts import build_examples, fewshot_indices, needs_prefix_space
from foundry.tokenizers import TokenizerConfig, build_tokenizer


@pytest.fixture(scope="module")
def neox(neox_tokenizer_path):
    if not neox_tokenizer_path.is_file():
        pytest.skip(f"gpt-neox-20b tokenizer not found at {neox_tokenizer_path}")
    return build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path)))


def _enc(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def _task(kind: str, **kw) -> ICLTaskConfig:
    return ICLTaskConfig(label="t", dataset_uri="x.jsonl", icl_task_type=kind, **kw)


def test_prefix_space_detection(neox):
    assert needs_prefix_space(neox)  # GPT-NeoX BPE encodes " a" as one token


def test_multiple_choice_prompt_token_for_token(neox):
    rows = [
        {"query": " Q1? ", "choices": ["a1", "b1"], "gold": 0},
        {"query": "Q2?", "choices": ["a2", "b2"], "gold": 1},
    ]
    cfg = _task("multiple_choice", prompt_string="P:", continuation_delimiter=" Answer: ", prelimiter="> ")
    ex = build_examples(cfg, rows, neox, num_fewshot=1, max_seq_len=64)[0]
    preamble = "P:\n> Q2? Answer: b2"  # the only other row is the shot (gold answer), fields stripped
    test = "\n> Q1? Answer:"  # right-stripped: the delimiter's space moves to the continuation
    assert ex.prompt == preamble + test
    assert [r.context for r in ex.requests] == [_enc(neox, preamble) + _enc(neox, test)] * 2
    assert [r.continuation for r in ex.requests] == [_enc(neox, " a1"), _enc(neox, " b1")]
    assert (ex.gold, ex.choices) == (0, ["a1", "b1"])


def test_language_modeling_prompt_and_left_truncation(neox):
    rows = [
        {"context": "The cat sat on the", "continuation": "mat"},
        {"context": "Two plus two is", "continuation": "four"},
    ]
    ex = build_examples(_task("language_modeling"), rows, neox, num_fewshot=1, max_seq_len=64)[1]
    assert ex.prompt == "The cat sat on the mat\nTwo plus two is"
    ctx = _enc(neox, "The cat sat on the mat") + _enc(neox, "\nTwo plus two is")
    assert ex.requests[0].context == ctx and ex.requests[0].continuation == _enc(neox, " four")
    short = build_examples(_task("language_modeling"), rows, neox, num_fewshot=1, max_seq_len=5)[1]
    assert short.requests[0].context == ctx[-4:]  # cut from the left, continuation (1 token) kept


def test_schema_prompt(neox):
    rows = [
        {"context_options": ["A likes B so A", "A likes B so B"], "continuation": "smiled.", "gold": 1},
        {"context_options": ["X or Y, X", "X or Y, Y"], "continuation": "won.", "gold": 0},
    ]
    ex = build_examples(_task("schema"), rows, neox, num_fewshot=1, max_seq_len=64)[0]
    shot = "X or Y, X won."  # the gold option + delimiter + continuation
    assert [r.context for r in ex.requests] == [
        _enc(neox, shot) + _enc(neox, "\nA likes B so A"),
        _enc(neox, shot) + _enc(neox, "\nA likes B so B"),
    ]
    assert all(r.continuation == _enc(neox, " smiled.") for r in ex.requests)
    assert ex.prompt == shot + "\nA likes B so B"


def test_generation_prompt_with_chain_of_thought(neox):
    rows = [
        {"context": "Q: 1+1?", "answer": "2", "aliases": ["2", "two"], "chain_of_thought": "1 and 1 make 2."},
        {"context": "Q: 2+2?", "answer": "4", "aliases": [], "chain_of_thought": "2 and 2 make 4."},
    ]
    cfg = _task(
        "generation_task_with_answers", continuation_delimiter="\nA:", cot_delimiter=" The answer is ",
        early_stopping_criteria=["\n\n"], example_delimiter="\n\n",
    )  # fmt: skip
    ex = build_examples(cfg, rows, neox, num_fewshot=1, max_seq_len=64)[0]
    assert ex.prompt == "Q: 2+2?\nA:2 and 2 make 4. The answer is 4\n\nQ: 1+1?\nA:"
    assert ex.requests[0].context == _enc(neox, "Q: 2+2?\nA:2 and 2 make 4. The answer is 4") + _enc(
        neox, "\n\nQ: 1+1?\nA:"
    )
    assert ex.labels == ["2", "two"] and ex.stop == ["\n\n"]
    longest = max(
        len(_enc(neox, " " + t))
        for t in ["1 and 1 make 2. The answer is 2", "2 and 2 make 4. The answer is 4"]
    )
    assert ex.max_new_tokens == longest + 10  # + the chain-of-thought buffer


def test_fewshot_never_picks_the_example_and_is_seeded():
    for seed in range(50):
        rng = random.Random(seed)
        for i in range(6):
            picks = fewshot_indices(rng, 6, 3, i)
            assert i not in picks and len(set(picks)) == 3
    assert fewshot_indices(random.Random(0), 3, 5, 1) == [0, 2]  # capped at n - 1
    a = [fewshot_indices(random.Random(7), 100, 5, i) for i in range(3)]
    assert a == [fewshot_indices(random.Random(7), 100, 5, i) for i in range(3)]


def test_categories_take_shots_from_their_own_category(icl_tokenizer):
    rows = [{"context": f"c{i}", "continuation": f"x{i}", "category": "ab"[i % 2]} for i in range(8)]
    cfg = _task("language_modeling", has_categories=True)
    for ex in build_examples(cfg, rows, icl_tokenizer, num_fewshot=3, max_seq_len=128):
        own = {f"c{i}" for i in range(8) if i % 2 == ex.index % 2}
        shots = [line.split(" ")[0] for line in ex.prompt.split("\n")[:-1]]
        assert len(shots) == 3 and set(shots) <= own - {f"c{ex.index}"} and ex.category == "ab"[ex.index % 2]
