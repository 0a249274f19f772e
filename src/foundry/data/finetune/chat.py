"""Chat rendering: a validated conversation -> templated (prompt, response) string turns.

Design note: as llm-foundry, every assistant message ends a turn. For the conversation up to and including
the k-th assistant message, the tokenizer's chat template renders (a) the whole prefix and (b) the prefix
without that message plus the generation prompt; the turn's prompt is (b) minus everything rendered for
earlier turns, and its response is (a) minus (b). This only works for prefix-consistent templates (each
rendering extends the previous one), which is checked and reported with the strings that disagree. A
tokenizer without a template gets ChatML (`<|im_start|>role\\n...<|im_end|>\\n`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from foundry.data.finetune.examples import ExampleError

__all__ = ["CHATML_TEMPLATE", "chat_turns"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)


def _render(
    # a transformers tokenizer
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    generation_prompt: bool,
    index: int | None,
) -> str:
    template = None if getattr(tokenizer, "chat_template", None) else CHATML_TEMPLATE
    try:
        text = tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=generation_prompt, chat_template=template
        )
    except Exception as err:
        # a user template can raise anything (jinja errors, raise_exception(...))
        raise ExampleError(index, f"the chat template failed on this conversation: {err}") from err
    return str(text)


def chat_turns(
    messages: Sequence[Mapping[str, Any]],
    # a transformers tokenizer
    tokenizer: Any,
    index: int | None = None,
) -> list[tuple[str, str]]:
    """Templated (prompt, response) strings, one pair per assistant message (see the module note)."""
    turns: list[tuple[str, str]] = []
    history = ""
    for i, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        full = _render(tokenizer, messages[: i + 1], generation_prompt=False, index=index)
        prompt = _render(tokenizer, messages[:i], generation_prompt=True, index=index)
        if not (full.startswith(history) and prompt.startswith(history) and full.startswith(prompt)):
            raise ExampleError(
                index,
                "the chat template is not prefix-consistent (rendering a longer conversation must extend the "
                f"rendering of a shorter one): conversation so far {history!r}, prompt {prompt!r}, "
                f"with the answer {full!r}; "
                "use a template that only appends, or tokenizer without one (ChatML)",
            )
        turns.append((prompt[len(history) :], full[len(prompt) :]))
        history = full
    return turns
