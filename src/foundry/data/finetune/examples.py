"""Finetuning example formats and their validation: prompt/response rows and chat (`messages`) rows.

Design note: llm-foundry's rules, checked before any tokenization so a bad row fails with a message that
names its index, the key at fault and the fix. A prompt/response row has exactly two keys, `prompt` and
`response` (or `completion`), both strings. A chat row has exactly one key, `messages`: a list of at
least two `{role, content}` dicts (exactly those two keys), roles in system/user/assistant/tool, no two
consecutive messages with the same role, the last one from the assistant; content is a string (or a list,
for multimodal templates). Rows with other keys need a `preprocessing_fn` that maps them to one of these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "CHAT",
    "PROMPT_RESPONSE",
    "ROLES",
    "ExampleError",
    "example_format",
    "prompt_response",
    "validate_messages",
]

PROMPT_RESPONSE = "prompt_response"
CHAT = "chat"
ROLES = ("system", "user", "assistant", "tool")
_RESPONSE_KEYS = ("response", "completion")


class ExampleError(ValueError):
    """A dataset row that is not a valid finetuning example (the message names the row and the problem)."""

    def __init__(self, row: int | None, problem: str) -> None:
        where = f"row {row}" if row is not None else "a row"
        super().__init__(f"finetuning data, {where}: {problem}")
        self.row = row


# `row`: any decoded dataset row
def example_format(row: Any, index: int | None = None) -> str:
    """Returns `PROMPT_RESPONSE` or `CHAT`; raises `ExampleError` naming `index` otherwise."""
    if not isinstance(row, Mapping):
        raise ExampleError(index, f"expected a mapping (dict), got {type(row).__name__}")
    keys = set(row)
    if keys == {"messages"}:
        return CHAT
    if len(keys) == 2 and "prompt" in keys and keys & set(_RESPONSE_KEYS):
        return PROMPT_RESPONSE
    raise ExampleError(
        index,
        f"unknown example format with keys {sorted(keys)}: a row needs exactly 'prompt' and 'response' (or "
        "'completion'), or exactly 'messages'; map other columns with data.preprocessing_fn (a registered "
        "name such as 'alpaca' or 'dolly', or 'module:function')",
    )


def prompt_response(row: Mapping[str, Any], index: int | None = None) -> tuple[str, str]:
    """The (prompt, response) strings of a prompt/response row."""
    key = "response" if "response" in row else "completion"
    for name in ("prompt", key):
        if not isinstance(row[name], str):
            raise ExampleError(index, f"{name!r} must be a string, got {type(row[name]).__name__}")
    return row["prompt"], row[key]


def validate_messages(row: Mapping[str, Any], index: int | None = None) -> list[Mapping[str, Any]]:
    """Checks a chat row against llm-foundry's rules; returns its messages."""
    messages = row["messages"]
    if not isinstance(messages, list):
        raise ExampleError(index, f"'messages' must be a list, got {type(messages).__name__}")
    if len(messages) < 2:
        raise ExampleError(index, f"a chat needs at least 2 messages, got {len(messages)}")
    previous = None
    for m, msg in enumerate(messages):
        if not isinstance(msg, Mapping) or set(msg) != {"role", "content"}:
            keys = sorted(msg) if isinstance(msg, Mapping) else type(msg).__name__
            raise ExampleError(
                index, f"message {m} must have exactly the keys 'role' and 'content', got {keys}"
            )
        role = msg["role"]
        if role not in ROLES:
            raise ExampleError(index, f"message {m} has role {role!r}; allowed roles are {list(ROLES)}")
        if not isinstance(msg["content"], str | list):
            raise ExampleError(
                index,
                f"message {m} content must be a string (or a list), got {type(msg['content']).__name__}",
            )
        if role == previous:
            raise ExampleError(
                index, f"messages {m - 1} and {m} both have role {role!r} (roles must alternate)"
            )
        previous = role
    if previous != "assistant":
        raise ExampleError(index, f"the last message must be from the assistant, got role {previous!r}")
    return messages
