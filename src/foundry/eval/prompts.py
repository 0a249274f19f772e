"""Prompt construction: jsonl rows -> token-level requests, as llm-foundry builds them (foundry.md §5.3).

Design note: the text layout is `prompt_string | shots | prelimiter + context + continuation_delimiter`, each
shot being `[example_delimiter] + prelimiter + context + continuation_delimiter + answer`. The preamble
(prompt + shots) is tokenized with special tokens (a trailing EOS dropped), the test context and the
continuation without, and they are joined at token level; the test context is right-stripped, and for
tokenizers that encode " a" as one token a space is put back in front of the continuation. Shots are drawn
with `random.Random(fewshot_random_seed)` consumed in dataset order, never the example itself. Every task
type becomes `Example`s holding one `Request` (context ids, continuation ids) per scored row, so scoring is
type-agnostic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from foundry.eval.config import ICLTaskConfig

__all__ = ["Example", "Request", "build_examples", "fewshot_indices", "needs_prefix_space"]


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


def needs_prefix_space(tokenizer: Any) -> bool:  # noqa: ANN401 - a transformers tokenizer
    """True for GPT-2-style BPE, which encodes " a" as a single token."""
    return len(tokenizer(" a", add_special_tokens=False)["input_ids"]) == 1


def fewshot_indices(rng: random.Random, n: int, k: int, exclude: int) -> list[int]:
    """`k` distinct indices in [0, n) other than `exclude` (ascending), drawn from `rng`."""
    k = min(k, n - 1)
    if k <= 0:
        return []
    picks = rng.sample(range(n), k)
    while exclude in picks:
        picks = rng.sample(range(n), k)
    return sorted(picks)


def _strip(value: Any) -> Any:  # noqa: ANN401
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


class _Builder:
    """Shared state of one task's prompt construction (tokenizer facts, delimiters, the task type)."""

    def __init__(self, cfg: ICLTaskConfig, tokenizer: Any, max_seq_len: int) -> None:  # noqa: ANN401
        self.cfg = cfg
        self.tok = tokenizer
        self.max_seq_len = max_seq_len
        self.prefix_space = needs_prefix_space(tokenizer)
        kind = cfg.icl_task_type
        self.context_key = cfg.context_key or {"multiple_choice": "query"}.get(kind, "context")
        self.answer_key = cfg.answer_key or {"language_modeling": "continuation"}.get(kind, "answer")

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def preamble(self, text: str) -> list[int]:
        ids = list(self.tok(text)["input_ids"])
        if ids and ids[-1] == self.tok.eos_token_id and not text.endswith(str(self.tok.eos_token)):
            ids = ids[:-1]  # some tokenizers append EOS; the preamble continues
        return ids

    def continuation(self, text: str) -> list[int]:
        if self.prefix_space and not text.startswith(" "):
            text = " " + text
        return self.encode(text)

    def answer(self, row: dict[str, Any]) -> str:
        kind, cfg = self.cfg.icl_task_type, self.cfg
        if kind == "multiple_choice":
            return row["choices"][row["gold"]]
        if kind == "generation_task_with_answers" and cfg.cot_delimiter and row.get("chain_of_thought"):
            return f"{row['chain_of_thought']}{cfg.cot_delimiter}{row[self.answer_key]}"
        return str(row[self.answer_key])

    def context_text(self, row: dict[str, Any], preceding: str, *, with_answer: bool) -> str:
        cfg = self.cfg
        lead = cfg.example_delimiter if preceding else ""
        if cfg.icl_task_type == "schema":
            text = f"{lead}{row['context_options'][row['gold']]}{cfg.continuation_delimiter}"
            return text + (row["continuation"] if with_answer else "")
        text = f"{lead}{cfg.prelimiter}{row[self.context_key]}{cfg.continuation_delimiter}"
        return text + (self.answer(row) if with_answer else "")

    def trim(self, context: list[int], cont_len: int, *, label: str) -> list[int]:
        room = self.max_seq_len - cont_len
        if room < 1:
            raise ValueError(
                f"task {label!r}: a continuation of {cont_len} tokens leaves no room for context within "
                f"max_seq_len={self.max_seq_len}; raise eval.max_seq_len"
            )
        return context[-room:] if len(context) > room else context


def _max_new_tokens(b: _Builder, rows: list[dict[str, Any]]) -> int:
    cfg = b.cfg
    if "max_new_tokens" in cfg.generation_kwargs:
        return int(cfg.generation_kwargs["max_new_tokens"])
    longest = 1
    for row in rows:
        for text in [b.answer(row), *(row.get("aliases") or [])]:
            longest = max(longest, len(b.continuation(str(text))))
    return longest + (10 if cfg.cot_delimiter else 0)


def _example(b: _Builder, row: dict[str, Any], index: int, preamble_text: str, max_new: int) -> Example:
    cfg, kind = b.cfg, b.cfg.icl_task_type
    pre = b.preamble(preamble_text)
    category = row.get("category") if cfg.has_categories else None
    if kind == "schema":
        cont = b.continuation(row["continuation"])
        requests, texts = [], []
        for option in row["context_options"]:
            lead = cfg.example_delimiter if preamble_text else ""
            text = f"{lead}{option}{cfg.continuation_delimiter}"
            text = text.rstrip() if cfg.strip_dataset else text
            texts.append(text)
            requests.append(Request(b.trim(pre + b.encode(text), len(cont), label=cfg.label), cont))
        prompt = preamble_text + texts[row["gold"]]
        return Example(index, prompt, requests, category, row["gold"], list(row["context_options"]))
    text = b.context_text(row, preamble_text, with_answer=False)
    text = text.rstrip() if cfg.strip_dataset else text
    context = pre + b.encode(text)
    prompt = preamble_text + text
    if kind == "language_modeling":
        cont = b.continuation(str(row[b.answer_key]))
        req = Request(b.trim(context, len(cont), label=cfg.label), cont)
        return Example(index, prompt, [req], category, choices=[str(row[b.answer_key])])
    if kind == "multiple_choice":
        requests = []
        for choice in row["choices"]:
            cont = b.continuation(str(choice))
            requests.append(Request(b.trim(context, len(cont), label=cfg.label), cont))
        return Example(index, prompt, requests, category, int(row["gold"]), [str(c) for c in row["choices"]])
    labels = list(dict.fromkeys([str(row[b.answer_key]), *(str(a) for a in row.get("aliases") or [])]))
    req = Request(b.trim(context, max_new, label=cfg.label), [])
    stop = list(cfg.early_stopping_criteria or [])
    return Example(index, prompt, [req], category, labels=labels, stop=stop, max_new_tokens=max_new)


def build_examples(
    cfg: ICLTaskConfig,
    rows: list[dict[str, Any]],
    tokenizer: Any,  # noqa: ANN401 - a transformers tokenizer
    *,
    num_fewshot: int,
    max_seq_len: int,
    limit: int | None = None,
) -> list[Example]:
    """The task's examples with `num_fewshot` shots each (from the same category when `has_categories`).

    Args:
        cfg: the task. rows: its jsonl rows. tokenizer: a transformers tokenizer.
        num_fewshot: shots per example. max_seq_len: context + continuation limit (context cut from the left).
        limit: build only the examples of the first `limit` rows (shots still come from every row).
    """
    b = _Builder(cfg, tokenizer, max_seq_len)
    if cfg.strip_dataset:
        rows = [{k: _strip(v) for k, v in row.items()} for row in rows]
    groups: dict[Any, list[int]] = {}
    for i, row in enumerate(rows):
        key = row.get("category") if cfg.has_categories else None
        groups.setdefault(key, []).append(i)
    max_new = _max_new_tokens(b, rows) if cfg.icl_task_type == "generation_task_with_answers" else 0
    out: list[Example] = []
    for members in groups.values():
        rng = random.Random(cfg.fewshot_random_seed)
        for pos, i in enumerate(members):
            if limit is not None and i >= limit:
                break
            text = cfg.prompt_string
            for j in fewshot_indices(rng, len(members), num_fewshot, pos):
                text += b.context_text(rows[members[j]], text, with_answer=True)
            out.append(_example(b, rows[i], i, text, max_new))
    out.sort(key=lambda e: e.index)
    return out
