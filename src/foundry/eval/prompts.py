"""Prompt construction: jsonl rows -> token-level requests, exactly as llm-foundry builds them
(foundry.md §5.3).

Design note: every rule below restates llm-foundry 0.22's `llmfoundry/eval/datasets` (read, not copied), so
each example's tokens equal its evaluator's:

* Rows are stripped first when `strip_dataset`: top-level string values only (list items such as `choices`,
  `context_options` or `aliases` keep their whitespace).
* Shots: one `random.Random(fewshot_random_seed)` per dataset (per category with `has_categories`), consumed
  in row order by `fewshot_indices`; the shots are used in that set's iteration order, not sorted.
* Text: `prompt_string | shots | test context`; a shot is `[example_delimiter] + prelimiter + context +
  continuation_delimiter + answer` (the delimiter only when text precedes it). Schema shots are
  `prelimiter + [example_delimiter] + gold option + continuation_delimiter + continuation`, and the test
  contexts `prelimiter + example_delimiter + option + continuation_delimiter.rstrip()` (just
  `prelimiter + option` with nothing before them).
* Tokens: the preamble (prompt + shots) is tokenized with special tokens and loses a trailing EOS when it
  has more than one token; the test context (right-stripped when `strip_dataset`, except schema) and the
  continuation (" " prepended for tokenizers that encode " a" as one token) without special tokens.
* Length: context + continuation may fill `max_seq_len` exactly; beyond that the context is cut from the
  left (per choice for multiple choice). A row whose continuation alone leaves no context token
  (`len(continuation) >= max_seq_len`; llm-foundry raises, or at exactly max_seq_len keeps the whole
  context and overflows) cannot be scored: it is skipped and counted in `Prompts.skipped`.
* Generation: the context window is `max_seq_len - max_answer_length`, where max_answer_length is the
  longest answer or alias (with chain of thought when the data has it) tokenized with special tokens, on
  the unstripped rows, + 10 when `cot_delimiter` is set; `generation_kwargs.max_new_tokens` overrides the
  generation length only (generation stops at `max_seq_len` in total, see the runner).

lm-eval's truncation window differs by one token: it keeps the last `max_length + 1` tokens of context +
continuation and feeds all but the last, so its context can be one token longer than ours (llm-foundry's)
for a row that does not fit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from foundry.eval.config import ICLTaskConfig

__all__ = [
    "Example",
    "Prompts",
    "Request",
    "build_prompts",
    "fewshot_indices",
    "needs_prefix_space",
    "strip_row",
]

COT_BUFFER = 10
"""Extra generation tokens when `cot_delimiter` is set (llm-foundry's answer buffer)."""


@dataclass
class Request:
    """One scored row: the log-likelihood of `continuation` after `context` (token ids)."""

    context: list[int]
    continuation: list[int]


@dataclass
class Example:
    """One test item: its requests (LM: 1, multiple choice / schema: one per choice, generation: 1 with no
    continuation) and what the metrics need."""

    index: int
    prompt: str
    requests: list[Request]
    category: str | None = None
    gold: int | None = None
    choices: list[str] = field(default_factory=list)
    """Multiple choice / schema: the choice (or context option) texts; LM: the continuation."""
    labels: list[str] = field(default_factory=list)
    """Generation: acceptable answers (answer + aliases)."""
    stop: list[str] = field(default_factory=list)
    max_new_tokens: int = 0
    shots: list[int] = field(default_factory=list)
    """Row indices of the few-shot examples, in prompt order."""


@dataclass
class Prompts:
    """A task's examples at one few-shot count, and the row indices that could not be scored."""

    examples: list[Example]
    skipped: list[int] = field(default_factory=list)
    """Rows skipped because their continuation leaves no room for context within max_seq_len."""


# `tokenizer`: a transformers tokenizer
def needs_prefix_space(tokenizer: Any) -> bool:
    """True for GPT-2-style BPE, which encodes " a" as a single token."""
    return len(tokenizer(" a", add_special_tokens=False)["input_ids"]) == 1


def fewshot_indices(rng: random.Random, n: int, k: int, exclude: int) -> list[int]:
    """The shots of row `exclude` among `n` rows, drawn from `rng`, in prompt order (llm-foundry's rule).

    `k` is capped at n - 1; `set(rng.sample(range(n), k))` is drawn; when it holds `exclude`, that index is
    removed and one replacement is drawn with `rng.choice(range(n))` until it is neither `exclude` nor
    already chosen. The result is the set's iteration order. `k == 0` draws nothing.
    """
    if k <= 0:
        return []
    picks = set(rng.sample(range(n), min(n - 1, k)))
    if exclude in picks:
        picks.remove(exclude)
        if len(picks) >= n - 1:
            return list(picks)
        extra = rng.choice(range(n))
        while extra in picks or extra == exclude:
            extra = rng.choice(range(n))
        picks.add(extra)
    return list(picks)


def strip_row(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with its top-level string values stripped (lists and their items untouched)."""
    return {k: v.strip() if isinstance(v, str) else v for k, v in row.items()}


class _Builder:
    """Shared state of one task's prompt construction (tokenizer facts, delimiters, the task type)."""

    def __init__(self, cfg: ICLTaskConfig, tokenizer: Any, max_seq_len: int) -> None:
        self.cfg = cfg
        self.tok = tokenizer
        self.max_seq_len = max_seq_len
        self.prefix_space = needs_prefix_space(tokenizer)
        kind = cfg.icl_task_type
        self.context_key = cfg.context_key or {"multiple_choice": "query"}.get(kind, "context")
        self.answer_key = cfg.answer_key or {"language_modeling": "continuation"}.get(kind, "answer")
        self.has_cot = False
        """Generation: the data has a `chain_of_thought` column (set by `build_prompts`)."""

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def preamble(self, text: str) -> list[int]:
        ids = list(self.tok(text)["input_ids"])
        eos = self.tok.eos_token_id
        if eos is not None and len(ids) > 1 and ids[-1] == eos:
            # some tokenizers append EOS; the preamble continues
            ids = ids[:-1]
        return ids

    def continuation(self, text: str) -> list[int]:
        if self.prefix_space and not text.startswith(" "):
            text = " " + text
        return self.encode(text)

    def answer(self, row: dict[str, Any]) -> str:
        """The answer text of a shot (no prefix space)."""
        kind = self.cfg.icl_task_type
        if kind == "multiple_choice":
            return row["choices"][row["gold"]]
        if kind == "generation_task_with_answers" and self.has_cot:
            return f"{row.get('chain_of_thought') or ''}{self.cfg.cot_delimiter}{row[self.answer_key]}"
        return str(row[self.answer_key])

    def shot_text(self, row: dict[str, Any], preceding: str) -> str:
        cfg = self.cfg
        lead = cfg.example_delimiter if preceding else ""
        if cfg.icl_task_type == "schema":
            option = row["context_options"][row["gold"]]
            return f"{cfg.prelimiter}{lead}{option}{cfg.continuation_delimiter}{row['continuation']}"
        return f"{lead}{cfg.prelimiter}{row[self.context_key]}{cfg.continuation_delimiter}{self.answer(row)}"

    def test_text(self, row: dict[str, Any], preceding: str) -> str:
        cfg = self.cfg
        lead = cfg.example_delimiter if preceding else ""
        text = f"{lead}{cfg.prelimiter}{row[self.context_key]}{cfg.continuation_delimiter}"
        return text.rstrip() if cfg.strip_dataset else text

    def schema_texts(self, row: dict[str, Any], preceding: str) -> list[str]:
        cfg = self.cfg
        if not preceding:
            return [f"{cfg.prelimiter}{c}" for c in row["context_options"]]
        delim = cfg.continuation_delimiter.rstrip() if cfg.strip_dataset else cfg.continuation_delimiter
        return [f"{cfg.prelimiter}{cfg.example_delimiter}{c}{delim}" for c in row["context_options"]]

    def trim(self, context: list[int], cont_len: int) -> list[int] | None:
        """`context` cut from the left so that context + continuation fit max_seq_len; None when no context
        token would be left."""
        if len(context) + cont_len <= self.max_seq_len:
            return context
        room = self.max_seq_len - cont_len
        return context[-room:] if room >= 1 else None


def max_answer_length(b: _Builder, raw_rows: list[dict[str, Any]]) -> int:
    """Generation: llm-foundry's `max_answer_length` (answers and aliases with special tokens, unstripped)."""
    cfg, longest = b.cfg, 0
    for row in raw_rows:
        for answer in [row[b.answer_key], *(row.get("aliases") or [])]:
            text = f"{row.get('chain_of_thought') or ''}{cfg.cot_delimiter}{answer}" if b.has_cot else answer
            longest = max(longest, len(b.tok(str(text))["input_ids"]))
    return longest + (COT_BUFFER if cfg.cot_delimiter else 0)


def _example(
    b: _Builder,
    row: dict[str, Any],
    raw: dict[str, Any],
    index: int,
    preamble_text: str,
    gen: tuple[int, int],
) -> Example | None:
    """The example of `row` (`raw`: unstripped) after `preamble_text`; None when it cannot fit max_seq_len."""
    cfg, kind = b.cfg, b.cfg.icl_task_type
    pre = b.preamble(preamble_text)
    category = row.get("category") if cfg.has_categories else None
    if kind == "schema":
        cont = b.continuation(row["continuation"])
        texts = b.schema_texts(row, preamble_text)
        contexts = [b.trim(pre + b.encode(t), len(cont)) for t in texts]
        if any(c is None for c in contexts):
            return None
        requests = [Request(c, cont) for c in contexts if c is not None]
        prompt = preamble_text + texts[row["gold"]]
        return Example(index, prompt, requests, category, row["gold"], list(row["context_options"]))
    text = b.test_text(row, preamble_text)
    context, prompt = pre + b.encode(text), preamble_text + text
    if kind == "language_modeling":
        cont = b.continuation(str(row[b.answer_key]))
        trimmed = b.trim(context, len(cont))
        if trimmed is None:
            return None
        return Example(index, prompt, [Request(trimmed, cont)], category, choices=[str(row[b.answer_key])])
    if kind == "multiple_choice":
        requests = []
        for choice in row["choices"]:
            cont = b.continuation(str(choice))
            trimmed = b.trim(context, len(cont))
            if trimmed is None:
                return None
            requests.append(Request(trimmed, cont))
        return Example(index, prompt, requests, category, int(row["gold"]), [str(c) for c in row["choices"]])
    window, max_new = gen
    if window < 1:
        return None
    # llm-foundry's labels: the answer and aliases as read (before stripping)
    labels = list(dict.fromkeys([str(raw[b.answer_key]), *(str(a) for a in raw.get("aliases") or [])]))
    req = Request(context[-window:] if len(context) > window else context, [])
    stop = list(cfg.early_stopping_criteria or [])
    return Example(index, prompt, [req], category, labels=labels, stop=stop, max_new_tokens=max_new)


def build_prompts(
    cfg: ICLTaskConfig,
    rows: list[dict[str, Any]],
    # a transformers tokenizer
    tokenizer: Any,
    *,
    num_fewshot: int,
    max_seq_len: int,
    limit: int | None = None,
) -> Prompts:
    """The task's examples with `num_fewshot` shots each (from the same category when `has_categories`).

    Args:
        cfg: the task. rows: its jsonl rows. tokenizer: a transformers tokenizer.
        num_fewshot: shots per example. max_seq_len: context + continuation limit (context cut from the left).
        limit: build only the examples of the first `limit` rows (shots still come from every row).

    Returns:
        `Prompts`: the examples in row order and the indices of rows that cannot be scored.
    """
    b = _Builder(cfg, tokenizer, max_seq_len)
    gen = (0, 0)
    if cfg.icl_task_type == "generation_task_with_answers":
        b.has_cot = any("chain_of_thought" in row for row in rows)
        longest = max_answer_length(b, rows)
        # llm-foundry raises max_seq_len to fit the answer
        window = max(max_seq_len, longest) - longest
        gen = (window, int(cfg.generation_kwargs.get("max_new_tokens", max(longest, 1))))
    raw_rows = rows
    if cfg.strip_dataset:
        rows = [strip_row(row) for row in rows]
    groups: dict[Any, list[int]] = {}
    for i, row in enumerate(rows):
        key = row.get("category") if cfg.has_categories else None
        groups.setdefault(key, []).append(i)
    out: list[Example] = []
    skipped: list[int] = []
    for members in groups.values():
        rng = random.Random(cfg.fewshot_random_seed)
        for pos, i in enumerate(members):
            if limit is not None and i >= limit:
                break
            text = cfg.prompt_string
            shots = [members[j] for j in fewshot_indices(rng, len(members), num_fewshot, pos)]
            for j in shots:
                text += b.shot_text(rows[j], text)
            ex = _example(b, rows[i], raw_rows[i], i, text, gen)
            if ex is None:
                skipped.append(i)
            else:
                ex.shots = shots
                out.append(ex)
    out.sort(key=lambda e: e.index)
    return Prompts(out, sorted(skipped))
