"""Prompt construction, token for token, against hand-written prompt strings (llm-foundry's layout)."""

from __future__ import annotations

import random

import pytest

from foundry.eval.config import ICLTaskConfig
from foundry.eval.prompts import build_prompts, fewshot_indices, needs_prefix_space
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
    ex = build_prompts(cfg, rows, neox, num_fewshot=1, max_seq_len=64).examples[0]
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
    ex = build_prompts(_task("language_modeling"), rows, neox, num_fewshot=1, max_seq_len=64).examples[1]
    assert ex.prompt == "The cat sat on the mat\nTwo plus two is"
    ctx = _enc(neox, "The cat sat on the mat") + _enc(neox, "\nTwo plus two is")
    assert ex.requests[0].context == ctx and ex.requests[0].continuation == _enc(neox, " four")
    short = build_prompts(_task("language_modeling"), rows, neox, num_fewshot=1, max_seq_len=5).examples[1]
    assert short.requests[0].context == ctx[-4:]  # cut from the left, continuation (1 token) kept


def test_schema_prompt_zero_shot(neox):
    rows = [{"context_options": ["A likes B so A ", "A likes B so B"], "continuation": "smiled.", "gold": 1}]
    cfg = _task("schema", prelimiter="> ", continuation_delimiter=" : ")
    ex = build_prompts(cfg, rows * 2, neox, num_fewshot=0, max_seq_len=64).examples[0]
    # nothing precedes: prelimiter + option (list items are not stripped), no continuation delimiter at all
    assert [r.context for r in ex.requests] == [
        _enc(neox, "> A likes B so A "),
        _enc(neox, "> A likes B so B"),
    ]
    assert ex.prompt == "> A likes B so B"


def test_schema_prompt(neox):
    rows = [
        {"context_options": ["A likes B so A", "A likes B so B"], "continuation": "smiled.", "gold": 1},
        {"context_options": ["X or Y, X", "X or Y, Y"], "continuation": "won.", "gold": 0},
    ]
    ex = build_prompts(_task("schema"), rows, neox, num_fewshot=1, max_seq_len=64).examples[0]
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
    ex = build_prompts(cfg, rows, neox, num_fewshot=1, max_seq_len=64).examples[0]
    assert ex.prompt == "Q: 2+2?\nA:2 and 2 make 4. The answer is 4\n\nQ: 1+1?\nA:"
    assert ex.requests[0].context == _enc(neox, "Q: 2+2?\nA:2 and 2 make 4. The answer is 4") + _enc(
        neox, "\n\nQ: 1+1?\nA:"
    )
    assert ex.labels == ["2", "two"] and ex.stop == ["\n\n"]
    # llm-foundry's max_answer_length: chain of thought + answer (and aliases), with special tokens, + 10
    texts = [f"{c} The answer is {a}" for c, a in [("1 and 1 make 2.", "2"), ("1 and 1 make 2.", "two")]]
    texts += ["2 and 2 make 4. The answer is 4"]
    assert ex.max_new_tokens == max(len(neox(t)["input_ids"]) for t in texts) + 10


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
    for ex in build_prompts(cfg, rows, icl_tokenizer, num_fewshot=3, max_seq_len=128).examples:
        own = {f"c{i}" for i in range(8) if i % 2 == ex.index % 2}
        shots = [line.split(" ")[0] for line in ex.prompt.split("\n")[:-1]]
        assert len(shots) == 3 and set(shots) <= own - {f"c{ex.index}"} and ex.category == "ab"[ex.index % 2]


def _llmfoundry_shots(rng: random.Random, n: int, k: int, example: int) -> list[int]:
    """llm-foundry's `get_fewshot_sample_idxs` as its source states it, returned in the set's order."""
    k = min(n - 1, k)
    chosen = set(rng.sample(range(0, n), k))
    if example in chosen:
        chosen.remove(example)
        if len(chosen) >= n - 1:
            return list(chosen)
        extra = rng.choice(range(0, n))
        while extra in chosen or extra == example:
            extra = rng.choice(range(0, n))
        chosen.add(extra)
    return list(chosen)


# Shots of rows 0..9 of a 10-row task, 3-shot, fewshot_random_seed 1234 (one rng over the rows in order),
# in prompt order: {1, 9, 7} iterates as 1, 9, 7 (9 collides with 1 in an 8-slot set table), not sorted.
GOLDEN_10x3 = [[1, 9, 7], [0, 5, 8], [0, 8, 3], [0, 5, 7], [9, 2, 7], [1, 2, 9], [0, 8, 7], [1, 3, 9],
               [1, 4, 0], [8, 1, 4]]  # fmt: skip


def test_fewshot_indices_golden_and_equal_to_llmfoundry_rule(icl_tokenizer):
    rng = random.Random(1234)
    assert [fewshot_indices(rng, 10, 3, i) for i in range(10)] == GOLDEN_10x3
    for seed, n, k in [(1234, 10, 3), (0, 5, 4), (7, 30, 10), (3, 2, 5), (9, 1, 3), (11, 50, 25)]:
        ours, ref = random.Random(seed), random.Random(seed)
        for i in range(n):
            assert fewshot_indices(ours, n, k, i) == _llmfoundry_shots(ref, n, k, i), (seed, n, k, i)
    # the prompts use the shots in that order
    rows = [{"context": f"c{i}", "continuation": f"x{i}"} for i in range(10)]
    examples = build_prompts(_task("language_modeling", num_fewshot=[3]), rows, icl_tokenizer,
                              num_fewshot=3, max_seq_len=128).examples  # fmt: skip
    for ex, shots in zip(examples, GOLDEN_10x3):
        assert ex.shots == shots
        assert ex.prompt == "\n".join([*(f"c{j} x{j}" for j in shots), f"c{ex.index}"])


def test_strip_applies_to_top_level_strings_only(neox):
    rows = [
        {"query": "  Q1?  ", "choices": [" a1 ", "b1\n"], "gold": 0},
        {"query": "Q2?", "choices": ["a2", " b2 "], "gold": 1},
    ]
    ex = build_prompts(_task("multiple_choice"), rows, neox, num_fewshot=1, max_seq_len=64).examples[0]
    assert ex.prompt == "Q2?  b2 \nQ1?"  # the shot's answer keeps its spaces; the query is stripped
    # a choice starting with a space gets no second one; list items keep their whitespace
    assert [r.continuation for r in ex.requests] == [_enc(neox, " a1 "), _enc(neox, " b1\n")]


class _AppendsEos:
    """A tokenizer wrapper that appends EOS when adding special tokens (as OPT-style tokenizers do)."""

    def __init__(self, tok) -> None:
        self.tok, self.eos_token_id, self.eos_token = tok, tok.eos_token_id, tok.eos_token

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        return {"input_ids": ids + [self.eos_token_id] if add_special_tokens else ids}


def test_preamble_drops_a_trailing_eos_only_after_other_tokens(icl_tokenizer):
    tok = _AppendsEos(icl_tokenizer)
    eos = tok.eos_token_id
    rows = [{"context": "1 + 1 =", "continuation": "2"}, {"context": "2 + 2 =", "continuation": "4"}]
    zero = build_prompts(_task("language_modeling"), rows, tok, num_fewshot=0, max_seq_len=64).examples[0]
    assert zero.requests[0].context == [eos] + _enc(icl_tokenizer, "1 + 1 =")  # a lone EOS is kept
    one = build_prompts(_task("language_modeling"), rows, tok, num_fewshot=1, max_seq_len=64).examples[0]
    assert one.requests[0].context == _enc(icl_tokenizer, "2 + 2 = 4") + _enc(icl_tokenizer, "\n1 + 1 =")


def test_exactly_max_seq_len_fits_and_unscorable_rows_are_skipped(icl_tokenizer):
    rows = [{"context": "red blue green cat dog sun moon", "continuation": "tree fish bird"}]
    cfg = _task("language_modeling")
    full = build_prompts(cfg, rows, icl_tokenizer, num_fewshot=0, max_seq_len=10_000).examples[0].requests[0]
    ctx, cont = full.context, full.continuation
    n = len(ctx) + len(cont)
    exact = build_prompts(cfg, rows, icl_tokenizer, num_fewshot=0, max_seq_len=n).examples[0].requests[0]
    assert exact.context == ctx  # context + continuation == max_seq_len: untouched
    cut = build_prompts(cfg, rows, icl_tokenizer, num_fewshot=0, max_seq_len=n - 1).examples[0].requests[0]
    assert cut.context == ctx[1:]  # one token over: the context loses its first token
    one = build_prompts(cfg, rows, icl_tokenizer, num_fewshot=0, max_seq_len=len(cont) + 1)
    assert one.examples[0].requests[0].context == ctx[-1:] and one.skipped == []
    for limit in (len(cont), len(cont) - 1):  # no context token left: skipped, counted, no exception
        none = build_prompts(cfg, rows, icl_tokenizer, num_fewshot=0, max_seq_len=limit)
        assert none.examples == [] and none.skipped == [0]


def test_multiple_choice_truncates_per_choice_and_generation_keeps_room_for_the_answer(icl_tokenizer):
    rows = [
        {"query": "red blue green cat dog sun moon", "choices": ["tree", "fish bird stone river"], "gold": 0}
    ]
    full = build_prompts(
        _task("multiple_choice"), rows, icl_tokenizer, num_fewshot=0, max_seq_len=999
    ).examples[0]
    ctx = full.requests[0].context
    long_cont = len(full.requests[1].continuation)
    limit = len(ctx) + long_cont - 2
    ex = build_prompts(
        _task("multiple_choice"), rows, icl_tokenizer, num_fewshot=0, max_seq_len=limit
    ).examples[0]
    assert ex.requests[1].context == ctx[2:]
    short = len(full.requests[0].continuation)
    assert ex.requests[0].context == ctx[max(0, len(ctx) + short - limit) :]
    gen = [{"context": "red blue green cat dog sun moon", "answer": "tree fish", "aliases": []}]
    cfg = _task("generation_task_with_answers")
    answer_len = len(icl_tokenizer("tree fish")["input_ids"])
    g = build_prompts(cfg, gen, icl_tokenizer, num_fewshot=0, max_seq_len=answer_len + 3).examples[0]
    assert len(g.requests[0].context) == 3 and g.max_new_tokens == answer_len
    assert build_prompts(cfg, gen, icl_tokenizer, num_fewshot=0, max_seq_len=answer_len).skipped == [0]
