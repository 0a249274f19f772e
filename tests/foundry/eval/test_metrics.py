"""ICL metrics on fixed inputs: answer normalisation, exact match (stops, chain of thought), MC rules."""

from __future__ import annotations

import math

import pytest

from foundry.eval.metrics import (
    exact_match,
    expected_calibration_error,
    mc_confidence,
    mc_predictions,
    normalize_answer,
)


def test_normalize_answer():
    assert normalize_answer("The  Eiffel_Tower!") == "eiffel tower"
    assert normalize_answer("An apple, a day") == "apple day"
    assert normalize_answer("it\u2019s `x`") == "it s x"
    assert normalize_answer("theory") == "theory"  # articles only as whole words


def test_exact_match_prefix_stop_and_normalisation():
    assert exact_match(" Paris, France", ["paris"]) == (True, "paris france")
    assert exact_match(" France Paris", ["Paris"])[0] is False  # must start with the label
    assert exact_match(" 42\nQuestion: next", ["42"], stop=["\n"]) == (True, "42")
    assert exact_match("x\nParis", ["Paris"], stop=["\n"])[0] is False  # cut at the first stop
    assert exact_match(" The answer", ["answer"], normalize=False)[0] is False  # only stripped
    assert exact_match(" The answer", ["The"], normalize=False) == (True, "The answer")


def test_exact_match_chain_of_thought():
    out = " 3 + 2 = 5. The answer is 5. The answer is 7\n\nQuestion: ..."
    assert exact_match(out, ["7"], stop=["\n\n"], cot_delimiter="The answer is ") == (True, "7")
    assert exact_match(out, ["5"], stop=["\n\n"], cot_delimiter="The answer is ")[0] is False


def test_mc_predictions_three_rules():
    # choice 0: 2 tokens, -3.0 (mean -1.5, 5 chars); choice 1: 6 tokens, -6.0 (mean -1.0, 30 chars)
    # choice 2: 1 token, -2.5 (mean -2.5, 1 char)
    preds = mc_predictions([-3.0, -6.0, -2.5], [2, 6, 1], ["abcde", "x" * 30, "z"])
    assert preds == {"foundry": 1, "acc": 2, "acc_norm": 1}  # per char: -0.6, -0.2, -2.5
    assert mc_predictions([-1.0, -1.0], [1, 1], ["a", "b"])["acc"] == 0  # ties: first


def test_expected_calibration_error_by_hand():
    # bucket 9 (mid 0.95): 2 examples, 1 right -> |0.5 - 0.95| = 0.45; bucket 2 (mid 0.25): 1 wrong -> 0.25
    assert expected_calibration_error([0.99, 0.91, 0.2], [True, False, False]) == pytest.approx(
        2 / 3 * 0.45 + 1 / 3 * 0.25
    )
    assert expected_calibration_error([1.0], [True]) == pytest.approx(0.05)  # 1.0 falls in the last bucket


def test_mc_confidence_by_hand():
    # choice 0: token probs 0.5, 0.3 -> mean 0.4; choice 1: 0.1 -> 0.1
    toks = [[math.log(0.5), math.log(0.3)], [math.log(0.1)]]
    assert mc_confidence(toks, 0) == pytest.approx(0.4 / 0.5)
    assert mc_confidence(toks, 1) == pytest.approx(0.1 / 0.5)
