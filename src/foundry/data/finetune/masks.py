"""Loss masks for finetuning: tokenized turns -> one `(input_ids, labels)` example, truncated, checked.

Design note: these are pure functions over lists of ints, so the exact semantics (llm-foundry's
`target_prompts` / `target_responses`, EOS appended to the final response, right truncation, the "no loss
tokens left" filter) are tested token by token without a tokenizer or a model. Labels are *unshifted*
(`labels[t] == input_ids[t]` where the token is a target, `-100` elsewhere); the model shifts them.
A turn is `(prompt_ids, response_ids)`: one user/system/tool prefix and the assistant answer that ends it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "IGNORE_INDEX",
    "Example",
    "TargetPolicy",
    "Turn",
    "build_example",
    "has_loss_tokens",
    "parse_target_prompts",
    "stitch_turns",
]

IGNORE_INDEX = -100

Turn = tuple[Sequence[int], Sequence[int]]
"""One prompt/response turn as token ids: (prompt_ids, response_ids)."""


@dataclass(frozen=True)
class Example:
    """One tokenized finetuning example: `input_ids` and unshifted `labels` of the same length."""

    input_ids: tuple[int, ...]
    labels: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True)
class TargetPolicy:
    """Which tokens generate loss.

    Attributes:
        prompts: "none" (never), "all" (always), or "length" (a prompt of at least `prompt_cutoff` tokens).
        prompt_cutoff: The N of `length>=N` (0 unless `prompts == "length"`).
        responses: "last" (only the final response) or "all" (every response).
    """

    prompts: str = "none"
    prompt_cutoff: int = 0
    responses: str = "last"

    @classmethod
    def parse(cls, target_prompts: str, target_responses: str) -> TargetPolicy:
        """Parses the config strings (case-insensitive, as llm-foundry);
        a bad value is a ValueError naming it."""
        prompts, cutoff = parse_target_prompts(target_prompts)
        responses = target_responses.lower()
        if responses not in ("last", "all"):
            raise ValueError(f"data.target_responses={target_responses!r}: use 'last' or 'all'")
        return cls(prompts=prompts, prompt_cutoff=cutoff, responses=responses)

    def prompt_is_target(self, n_tokens: int) -> bool:
        if self.prompts == "length":
            return n_tokens >= self.prompt_cutoff
        return self.prompts == "all"

    def response_is_target(self, is_last: bool) -> bool:
        return is_last or self.responses == "all"


def parse_target_prompts(value: str) -> tuple[str, int]:
    """`none` | `all` | `length>=N` (N a positive integer) -> (kind, cutoff)."""
    v = value.lower()
    if v in ("none", "all"):
        return v, 0
    if v.startswith("length>="):
        n = v[len("length>=") :]
        if n.isdigit() and int(n) > 0:
            return "length", int(n)
    raise ValueError(
        f"data.target_prompts={value!r}: use 'none', 'all' or 'length>=N' with N a positive integer "
        "(prompts of at least N tokens then generate loss)"
    )


def stitch_turns(
    turns: Sequence[Turn], *, policy: TargetPolicy, eos_token_id: int | None
) -> tuple[list[int], list[int]]:
    """Concatenates turns into `prompt_1 + response_1 + prompt_2 + ...` with labels set by `policy`.

    The final response gets `eos_token_id` appended when it does not already end with it (None: never).
    Returns untruncated `(input_ids, labels)`.
    """
    input_ids: list[int] = []
    labels: list[int] = []
    for i, (prompt, response) in enumerate(turns):
        is_last = i == len(turns) - 1
        prompt, response = list(prompt), list(response)
        if is_last and eos_token_id is not None and (not response or response[-1] != eos_token_id):
            response.append(eos_token_id)
        input_ids += prompt + response
        labels += prompt if policy.prompt_is_target(len(prompt)) else [IGNORE_INDEX] * len(prompt)
        labels += response if policy.response_is_target(is_last) else [IGNORE_INDEX] * len(response)
    return input_ids, labels


def has_loss_tokens(labels: Sequence[int]) -> bool:
    """Whether any label generates loss once the model shifts labels (position 0 never does)."""
    return any(label != IGNORE_INDEX for label in labels[1:])


def build_example(
    turns: Sequence[Turn], *, policy: TargetPolicy, eos_token_id: int | None, max_seq_len: int
) -> Example | None:
    """Stitches, right-truncates to `max_seq_len`, and returns None when no loss token is left.

    llm-foundry also drops examples with an empty prompt or response in any turn; so do we.
    """
    if any(len(p) == 0 or len(r) == 0 for p, r in turns):
        return None
    input_ids, labels = stitch_turns(turns, policy=policy, eos_token_id=eos_token_id)
    input_ids, labels = input_ids[:max_seq_len], labels[:max_seq_len]
    if not has_loss_tokens(labels):
        return None
    return Example(tuple(input_ids), tuple(labels))
