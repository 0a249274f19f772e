"""Row validation (llm-foundry's rules) with errors naming the row; ChatML turns; tokenizing rows."""

from __future__ import annotations

import pytest

from foundry.data.finetune.chat import chat_turns
from foundry.data.finetune.examples import (
    CHAT,
    PROMPT_RESPONSE,
    ExampleError,
    example_format,
    validate_messages,
)
from foundry.data.finetune.preprocess import alpaca, dolly, resolve_preprocessing_fn
from foundry.data.finetune.tokenize import tokenize_row

CONVO = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U1"},
    {"role": "assistant", "content": "A1"},
    {"role": "user", "content": "U2"},
    {"role": "assistant", "content": "A2"},
]


def test_formats():
    assert example_format({"prompt": "a", "response": "b"}) == PROMPT_RESPONSE
    assert example_format({"prompt": "a", "completion": "b"}) == PROMPT_RESPONSE
    assert example_format({"messages": CONVO}) == CHAT


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ({"prompt": "a", "response": "b", "x": 1}, "unknown example format with keys"),
        ({"instruction": "a"}, "preprocessing_fn"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_unknown_format_names_the_row(row, problem):
    with pytest.raises(ExampleError, match=rf"row 7: .*{problem}"):
        example_format(row, 7)


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ("hi", "'messages' must be a list"),
        ([{"role": "assistant", "content": "x"}], "at least 2 messages"),
        ([{"role": "user", "content": "x"}, {"role": "bot", "content": "y"}], "message 1 has role 'bot'"),
        ([{"role": "user", "content": "x"}, {"role": "user", "content": "y"}], "both have role 'user'"),
        ([{"role": "user", "content": "x"}, {"role": "assistant", "text": "y"}], "exactly the keys"),
        ([{"role": "user", "content": "x"}, {"role": "assistant", "content": 3}], "content must be a string"),
        (
            [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}],
            "last message must be from",
        ),
    ],
)
def test_chat_rules_name_row_and_message(messages, problem):
    with pytest.raises(ExampleError, match=rf"row 3: .*{problem}"):
        validate_messages({"messages": messages}, 3)


def test_prompt_must_be_a_string():
    with pytest.raises(ExampleError, match="row 0: 'prompt' must be a string"):
        tokenize_row({"prompt": 1, "response": "x"}, tokenizer=None, index=0)


def test_chatml_turns_split_at_assistant_messages(neox):
    assert neox.chat_template is None
    assert chat_turns(CONVO, neox) == [
        (
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\n",
            "A1<|im_end|>\n",
        ),
        ("<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n", "A2<|im_end|>\n"),
    ]


def test_tool_role_and_custom_template(neox):
    tok = neox.__class__(tokenizer_object=neox.backend_tokenizer, eos_token="<|endoftext|>")
    tok.chat_template = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    convo = [
        {"role": "user", "content": "q"},
        {"role": "tool", "content": "t"},
        {"role": "assistant", "content": "a"},
    ]
    assert chat_turns(convo, tok) == [("[user]q[tool]t[assistant]", "a")]


def test_prefix_inconsistent_template_is_reported(neox):
    tok = neox.__class__(tokenizer_object=neox.backend_tokenizer, eos_token="<|endoftext|>")
    tok.chat_template = "{{ messages | length }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ExampleError, match="row 5: the chat template is not prefix-consistent"):
        chat_turns(CONVO, tok, 5)


def test_tokenized_chat_has_no_extra_special_tokens(neox):
    turns = tokenize_row({"messages": CONVO[1:3]}, neox, 0)
    prompt, response = turns[0]
    assert neox.decode(prompt) == "<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\n"
    assert neox.decode(response) == "A1<|im_end|>\n"


def test_shipped_preprocessors():
    text = "Below is an instruction.\n\n### Instruction:\nSay hi\n\n### Response:\nhi"
    # as llm-foundry: the prompt ends with the marker, the response keeps the newline after it
    assert alpaca({"text": text}) == {"prompt": text[: -len("\nhi")], "response": "\nhi"}
    row = dolly({"instruction": "Add", "input": "1 and 2", "output": "3"})
    assert (
        row["prompt"].endswith("### Instruction:\nAdd\n1 and 2\n\n### Response:\n") and row["response"] == "3"
    )
    assert resolve_preprocessing_fn("dolly") is dolly
    assert resolve_preprocessing_fn(None, dataset="tatsu-lab/alpaca") is alpaca
    assert resolve_preprocessing_fn(None, dataset="mosaicml/dolly_hhrlhf") is None
    assert resolve_preprocessing_fn("foundry.data.finetune.preprocess:dolly") is dolly
    with pytest.raises(ValueError, match="not registered"):
        resolve_preprocessing_fn("alpacca")
    with pytest.raises(ValueError, match="cannot import"):
        resolve_preprocessing_fn("nowhere.module:fn")
