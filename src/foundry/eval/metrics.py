"""ICL metrics as llm-foundry computes them (foundry.md §5.5), plus lm-eval-style `acc` / `acc_norm`.

Design note: metrics are pure functions of per-example outcomes, so each is checked by hand on fixed
numbers. Multiple choice is reported three ways because they differ: llm-foundry's accuracy picks the
choice with the lowest perplexity (mean per-token loss), lm-eval's `acc` the highest summed log-likelihood
and `acc_norm` the highest log-likelihood per character of the choice text (lm-eval's "byte length").
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

__all__ = [
    "LM_ACCURACY",
    "MC_ACCURACY",
    "GEN_ACCURACY",
    "exact_match",
    "mc_predictions",
    "normalize_answer",
]

LM_ACCURACY = "InContextLearningLMAccuracy"
MC_ACCURACY = "InContextLearningMultipleChoiceAccuracy"
GEN_ACCURACY = "InContextLearningGenerationExactMatchAccuracy"

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
