"""Loss masks token by token: prompt/response and multi-turn turns under every target setting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from foundry.data.finetune.masks import (
    IGNORE_INDEX,
    TargetPolicy,
    build_example,
    has_loss_tokens,
    stitch_turns,
)

X = IGNORE_INDEX
EOS = 9
SINGLE = [([1, 2, 3], [4, 5])]
MULTI = [([1, 2], [3]), ([4, 5, 6], [7, 8])]


@pytest.mark.parametrize(
    ("prompts", "responses", "labels"),
    [
        ("none", "last", [X, X, X, 4, 5, EOS]),
        ("none", "all", [X, X, X, 4, 5, EOS]),
        ("all", "last", [1, 2, 3, 4, 5, EOS]),
        ("all", "all", [1, 2, 3, 4, 5, EOS]),
        ("length>=3", "last", [1, 2, 3, 4, 5, EOS]),
        ("length>=4", "last", [X, X, X, 4, 5, EOS]),
        ("LENGTH>=4", "ALL", [X, X, X, 4, 5, EOS]),
    ],
)
def test_prompt_response_labels(prompts, responses, labels):
    ids, got = stitch_turns(SINGLE, policy=TargetPolicy.parse(prompts, responses), eos_token_id=EOS)
    assert ids == [1, 2, 3, 4, 5, EOS]
    assert got == labels


@pytest.mark.parametrize(
    ("prompts", "responses", "labels"),
    [
        ("none", "last", [X, X, X, X, X, X, 7, 8, EOS]),
        ("none", "all", [X, X, 3, X, X, X, 7, 8, EOS]),
        ("all", "last", [1, 2, X, 4, 5, 6, 7, 8, EOS]),
        ("all", "all", [1, 2, 3, 4, 5, 6, 7, 8, EOS]),
        ("length>=3", "last", [X, X, X, 4, 5, 6, 7, 8, EOS]),
        ("length>=3", "all", [X, X, 3, 4, 5, 6, 7, 8, EOS]),
        ("length>=2", "last", [1, 2, X, 4, 5, 6, 7, 8, EOS]),
    ],
)
def test_multi_turn_labels(prompts, responses, labels):
    ids, got = stitch_turns(MULTI, policy=TargetPolicy.parse(prompts, responses), eos_token_id=EOS)
    assert ids == [1, 2, 3, 4, 5, 6, 7, 8, EOS]
    assert got == labels


def test_eos_not_doubled_and_only_on_final_response():
    ids, labels = stitch_turns([([1], [2, EOS]), ([3], [4, EOS])], policy=TargetPolicy(), eos_token_id=EOS)
    assert ids == [1, 2, EOS, 3, 4, EOS]
    assert labels == [X, X, X, X, 4, EOS]
    ids, _ = stitch_turns([([1], [2]), ([3], [4])], policy=TargetPolicy(), eos_token_id=EOS)
    assert ids == [1, 2, 3, 4, EOS]  # the middle response gets none
    ids, _ = stitch_turns([([1], [2])], policy=TargetPolicy(), eos_token_id=None)
    assert ids == [1, 2]


def test_truncation_keeps_the_left_and_drops_rows_without_loss():
    policy = TargetPolicy.parse("none", "all")
    ex = build_example(MULTI, policy=policy, eos_token_id=EOS, max_seq_len=5)
    assert ex is not None and ex.input_ids == (1, 2, 3, 4, 5) and ex.labels == (X, X, 3, X, X)
    assert build_example(MULTI, policy=TargetPolicy(), eos_token_id=EOS, max_seq_len=5) is None
    assert build_example(MULTI, policy=policy, eos_token_id=EOS, max_seq_len=2) is None
    full = build_example(MULTI, policy=TargetPolicy(), eos_token_id=EOS, max_seq_len=100)
    assert full is not None and len(full) == 9


def test_empty_prompt_or_response_is_dropped():
    assert build_example([([], [1, 2])], policy=TargetPolicy(), eos_token_id=EOS, max_seq_len=8) is None
    assert build_example([([1], [])], policy=TargetPolicy(), eos_token_id=EOS, max_seq_len=8) is None


def test_position_zero_is_never_a_loss_token():
    assert not has_loss_tokens([5, X, X])
    assert has_loss_tokens([X, 5])


@pytest.mark.parametrize(
    ("prompts", "responses"),
    [("some", "last"), ("length>=0", "last"), ("length>=x", "last"), ("none", "first")],
)
def test_bad_target_settings_name_the_field(prompts, responses):
    with pytest.raises(ValueError, match="data.target_"):
        TargetPolicy.parse(prompts, responses)


_turns = st.lists(
    st.tuples(
        st.lists(st.integers(10, 99), min_size=1, max_size=6),
        st.lists(st.integers(10, 99), min_size=1, max_size=6),
    ),
    min_size=1,
    max_size=4,
)
_policy = st.builds(
    TargetPolicy.parse,
    st.sampled_from(["none", "all", "length>=1", "length>=3", "length>=7"]),
    st.sampled_from(["last", "all"]),
)


@given(turns=_turns, policy=_policy, max_len=st.integers(1, 40))
def test_labels_are_the_tokens_or_ignored(turns, policy, max_len):
    ids, labels = stitch_turns(turns, policy=policy, eos_token_id=EOS)
    assert len(ids) == len(labels) == sum(len(p) + len(r) for p, r in turns) + 1
    assert all(lab in (X, tok) for lab, tok in zip(labels, ids, strict=True))
    assert labels[-1] == EOS  # the final response always generates loss
    ex = build_example(turns, policy=policy, eos_token_id=EOS, max_seq_len=max_len)
    if ex is not None:
        assert ex.input_ids == tuple(ids[:max_len]) and ex.labels == tuple(labels[:max_len])
        assert has_loss_tokens(ex.labels)
    else:
        assert not has_loss_tokens(labels[:max_len])
