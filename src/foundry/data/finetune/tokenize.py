"""Tokenizing finetuning rows: a validated row -> turns of token ids -> an `Example` (or None when filtered).

Design note: llm-foundry's conventions, so the same rows give the same tokens. Prompt/response rows are
tokenized with the tokenizer's default special tokens (prompt and response separately, as
`tokenizer(text=prompt, text_target=response)` does) and a BOS that starts both is dropped from the
response; chat turns are already templated (the template carries the special tokens), so they are
tokenized with `add_special_tokens=False`. `ExampleBuilder` carries the tokenizer and the masking settings
so DataLoader workers can run it (it is picklable).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from foundry.data.finetune.chat import chat_turns
from foundry.data.finetune.examples import (
    CHAT,
    ExampleError,
    example_format,
    prompt_response,
    validate_messages,
)
from foundry.data.finetune.masks import Example, TargetPolicy, Turn, build_example
from foundry.data.finetune.preprocess import Preprocessor

__all__ = ["ExampleBuilder", "tokenize_row", "turns_from_tokenized"]


# `tokenizer`: a transformers tokenizer
def _ids(tokenizer: Any, text: str, *, special: bool) -> list[int]:
    return list(tokenizer(text, add_special_tokens=special)["input_ids"])


def tokenize_row(
    row: Mapping[str, Any],
    # a transformers tokenizer
    tokenizer: Any,
    index: int | None = None,
) -> list[Turn]:
    """The turns of a prompt/response or chat row as token ids (validated; errors name `index`)."""
    if example_format(row, index) == CHAT:
        messages = validate_messages(row, index)
        return [
            (_ids(tokenizer, p, special=False), _ids(tokenizer, r, special=False))
            for p, r in chat_turns(messages, tokenizer, index)
        ]
    prompt, response = prompt_response(row, index)
    prompt_ids = _ids(tokenizer, prompt, special=True)
    response_ids = _ids(tokenizer, response, special=True)
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and prompt_ids[:1] == [bos] and response_ids[:1] == [bos]:
        response_ids = response_ids[1:]
    return [(prompt_ids, response_ids)]


def turns_from_tokenized(row: Mapping[str, Any], index: int | None = None) -> list[Turn]:
    """Turns of a pre-tokenized row (`turns`: [{input_ids, labels}, ...], llm-foundry's MDS format)."""
    turns = row["turns"]
    if not isinstance(turns, list) or not turns:
        raise ExampleError(index, "'turns' must be a non-empty list of {input_ids, labels}")
    try:
        return [([int(t) for t in turn["input_ids"]], [int(t) for t in turn["labels"]]) for turn in turns]
    except (KeyError, TypeError, ValueError) as err:
        raise ExampleError(
            index, f"'turns' entries need integer lists 'input_ids' and 'labels' ({err})"
        ) from err


class ExampleBuilder:
    """Row -> `Example` (None when no loss token survives truncation), for raw or pre-tokenized rows.

    Args:
        tokenizer: Tokenizes raw rows and gives the EOS id.
        policy: Which prompt/response tokens generate loss.
        max_seq_len: Right truncation length.
        preprocess: Maps raw rows to prompt/response or chat first (not applied to pre-tokenized rows).
    """

    def __init__(
        self,
        *,
        # a transformers tokenizer
        tokenizer: Any,
        policy: TargetPolicy,
        max_seq_len: int,
        preprocess: Preprocessor | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.policy = policy
        self.max_seq_len = max_seq_len
        self.preprocess = preprocess
        self.eos_token_id = getattr(tokenizer, "eos_token_id", None)

    def turns(self, row: Mapping[str, Any], index: int | None = None) -> list[Turn]:
        if isinstance(row, Mapping) and "turns" in row:
            return turns_from_tokenized(row, index)
        if self.preprocess is not None:
            try:
                row = self.preprocess(row)
            except Exception as err:
                # user code: report the row, keep the cause
                raise ExampleError(index, f"preprocessing_fn failed: {err}") from err
        return tokenize_row(row, self.tokenizer, index)

    def __call__(self, row: Mapping[str, Any], index: int | None = None) -> Example | None:
        return build_example(
            self.turns(row, index),
            policy=self.policy,
            eos_token_id=self.eos_token_id,
            max_seq_len=self.max_seq_len,
        )
