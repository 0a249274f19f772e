"""ICL metrics as llm-foundry computes them (foundry.md §5.5), plus lm-eval-style `acc` / `acc_norm`.

Design note: metrics are pure functions of per-example outcomes, so each is checked by hand on fixed
numbers. Multiple choice is reported three ways because they differ: llm-foundry's accuracy picks the
choice with the lowest perplexity (mean per-token loss), lm-eval's `acc` the highest summed log-likelihood
and `acc_norm` the highest log-likelihood per character of the choice text (lm-eval's "byte length").
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Sequence

__all__ = [
    "LM_ACCURACY",
    "MC_ACCURACY",
    "GEN_ACCURACY",
    "LM_ECE",
    "MC_ECE",
    "exact_match",
    "expected_calibration_error",
    "mc_confidence",
    "mc_predictions",
    "normalize_answer",
]

LM_ACCURACY = "InContextLearningLMAccuracy"
MC_ACCURACY = "InContextLearningMultipleChoiceAccuracy"
GEN_ACCURACY = "InContextLearningGenerationExactMatchAccuracy"
LM_ECE = "InContextLearningLMExpectedCalibrationError"
MC_ECE = "InContextLearningMCExpectedCalibrationError"

_PUNCT = set(string.punctuation) | {"\u2018", "\u2019", "\u00b4", "`"}
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, `_` -> space, punctuation -> space, drop a/an/the, collapse whitespace."""
    text = text.replace("_", " ").lower()
    text = "".join(" " if ch in _PUNCT else ch for ch in text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _argmax(values: Sequence[float]) -> int:
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def mc_predictions(
    logprobs: Sequence[float], num_tokens: Sequence[int], choice_texts: Sequence[str]
) -> dict[str, int]:
    """Predicted choice index by each rule: `foundry` (lowest perplexity), `acc` (summed log-likelihood),
    `acc_norm` (log-likelihood per character of the choice text; ties go to the first choice)."""
    mean = [lp / max(n, 1) for lp, n in zip(logprobs, num_tokens)]
    per_char = [lp / max(len(t), 1) for lp, t in zip(logprobs, choice_texts)]
    return {"foundry": _argmax(mean), "acc": _argmax(logprobs), "acc_norm": _argmax(per_char)}


def exact_match(
    output: str,
    labels: Sequence[str],
    *,
    stop: Sequence[str] = (),
    cot_delimiter: str = "",
    normalize: bool = True,
) -> tuple[bool, str]:
    """llm-foundry's generation exact match: cut the output at the first stop string, keep the text after the
    last `cot_delimiter`, normalise (or only strip), and accept when it starts with any normalised label.

    Returns:
        (correct, the cleaned answer).
    """
    if stop:
        output = re.split("|".join(re.escape(s) for s in stop), output)[0]
    if cot_delimiter and cot_delimiter in output:
        output = output.split(cot_delimiter)[-1]
    clean = normalize_answer if normalize else str.strip
    answer = clean(output)
    return any(answer.startswith(clean(label)) for label in labels), answer


def expected_calibration_error(
    confidences: Sequence[float], correct: Sequence[bool], *, buckets: int = 10
) -> float:
    """`sum_b (n_b / N) |acc_b - mid_b|` over `buckets` equal confidence bins (mid_b: the bin's centre)."""
    if not confidences:
        return float("nan")
    counts = [0] * buckets
    hits = [0] * buckets
    for conf, ok in zip(confidences, correct):
        b = min(int(conf * buckets), buckets - 1)
        counts[b] += 1
        hits[b] += int(ok)
    total = len(confidences)
    return sum(
        n / total * abs(h / n - (b + 0.5) / buckets) for b, (n, h) in enumerate(zip(counts, hits)) if n
    )


def mc_confidence(token_logprobs: Sequence[Sequence[float]], pred: int) -> float:
    """llm-foundry's MC confidence: the predicted choice's mean token probability over the sum of every
    choice's mean token probability."""
    means = [sum(math.exp(t) for t in toks) / max(len(toks), 1) for toks in token_logprobs]
    return means[pred] / sum(means) if sum(means) > 0 else 0.0
