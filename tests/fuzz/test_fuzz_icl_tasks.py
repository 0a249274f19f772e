"""Fuzz (issue 39), entry point 6: ICL task files (jsonl rows in llm-foundry's formats) read by `task=eval`
(`foundry.eval.data.load_rows`, then `foundry.eval.prompts.build_prompts`).

Each input is a task of each type (language modeling, multiple choice, schema, generation) whose valid rows
(`offline://` generators) get one hostile change: a value, key or row replaced (wrong types, missing fields,
bad gold indexes, deep JSON), the text edited at the byte level, or a line over the 16 MiB limit; the task's
few-shot count, categories, stripping and sequence length vary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from tests.fuzz import hostile
from tests.fuzz.harness import fuzz

ENTRY = "ICL task files (jsonl)"
ALLOWED = (ValueError, FileNotFoundError)  # train.py's one-line errors (task=eval)
NAMES = ("task", "tasks.jsonl")
SHORT_EXAMPLES = 60
TYPES = {
    "language_modeling": "repeat_copy",
    "multiple_choice": "arithmetic_mc",
    "schema": "compare_schema",
    "generation_task_with_answers": "arithmetic",
}


class CharTokenizer:
    """A tokenizer with the interface `build_prompts` uses: one id per character, BOS 1 and EOS 2."""

    eos_token_id = 2

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        ids = [3 + ord(c) % 97 for c in text]
        return {"input_ids": [1, *ids, 2] if add_special_tokens else ids}


def prepare(work: Path) -> dict[str, Any]:
    import foundry.eval.prompts  # noqa: F401 - imported before the memory limit is set
    from foundry.eval.synthetic import generate_offline

    return {kind: generate_offline(name, n=8) for kind, name in TYPES.items()}


def cases() -> st.SearchStrategy[dict[str, Any]]:
    rows_edit = st.one_of(
        hostile.json_edits(),
        st.tuples(st.just("gold"), st.integers(0, 7), hostile.integers() | hostile.scalars()),
        st.tuples(
            st.just("lines"), st.sampled_from(["blank", "bom", "crlf", "nul", "no-newline", "comment"])
        ),
    )
    return st.fixed_dictionaries(
        {
            "type": st.sampled_from(sorted(TYPES)),
            "edit": rows_edit,
            "num_fewshot": st.sampled_from([0, 1, 3, 10]),
            "has_categories": st.booleans(),
            "strip_dataset": st.booleans(),
            "max_seq_len": st.sampled_from([4, 16, 256, 2048]),
            "keys": st.sampled_from([None, "missing", "gold"]),
        }
    )


def EXAMPLES() -> list[dict[str, Any]]:
    valid = {"edit": hostile.NO_EDIT, "num_fewshot": 1, "has_categories": False, "strip_dataset": True}
    return [
        *({"type": t, **valid, "max_seq_len": 256, "keys": None, "check": True} for t in sorted(TYPES)),
        {"type": "multiple_choice", **valid, "edit": ("gold", 0, -1), "max_seq_len": 256, "keys": None},
        {"type": "language_modeling", **valid, "edit": ("huge",), "max_seq_len": 256, "keys": None},
    ]


def build(case: dict[str, Any], folder: Path, base: dict[str, Any]) -> dict[str, Any]:
    rows = json.loads(json.dumps(base[case["type"]]))
    if case["has_categories"]:
        for i, row in enumerate(rows):
            row["category"] = "ab"[i % 2]
    edit = case["edit"]
    path = folder / "tasks.jsonl"
    if edit[0] == "huge":  # one line over the 16 MiB line limit
        path.write_text(json.dumps({"context": "x" * (17 << 20), "continuation": "y"}) + "\n")
    elif edit[0] == "gold":
        rows[edit[1] % len(rows)]["gold"] = hostile.materialize(edit[2])
        path.write_text("".join(hostile.dumps(r) + "\n" for r in rows))
    elif edit[0] == "lines":
        text = "".join(json.dumps(r) + "\n" for r in rows)
        text = {
            "blank": text.replace("\n", "\n\n"),
            "bom": "\ufeff" + text,
            "crlf": text.replace("\n", "\r\n"),
            "nul": text.replace("\n", "\x00\n", 1),
            "no-newline": text.rstrip("\n"),
            "comment": "# rows\n" + text,
        }[edit[1]]
        path.write_text(text)
    elif edit[0] == "text":
        path.write_bytes(hostile.apply_bytes("".join(json.dumps(r) + "\n" for r in rows).encode(), edit[1]))
    elif edit[0] == "replace":
        path.write_bytes(edit[1].encode("utf-8", "surrogatepass"))
    else:
        rows = hostile.edit_value(rows, edit)
        if isinstance(rows, list):
            path.write_bytes("".join(hostile.dumps(r) + "\n" for r in rows).encode("utf-8", "surrogatepass"))
        else:
            path.write_bytes(hostile.dumps(rows).encode("utf-8", "surrogatepass"))
    return {**case, "path": path}


def attempt(built: dict[str, Any], folder: Path) -> None:
    from foundry.eval.config import ICLTaskConfig
    from foundry.eval.data import load_rows
    from foundry.eval.prompts import build_prompts

    keys = {"missing": {"context_key": "nope", "answer_key": "nope"}, "gold": {"answer_key": "gold"}}
    task = ICLTaskConfig(
        label="t",
        dataset_uri="tasks.jsonl",
        icl_task_type=built["type"],
        num_fewshot=[built["num_fewshot"]],
        has_categories=built["has_categories"],
        strip_dataset=built["strip_dataset"],
        cot_delimiter=" so " if built["type"] == "generation_task_with_answers" and built["keys"] else "",
        **keys.get(built["keys"] or "", {}),
    )
    rows = load_rows(task, data_root=folder)
    prompts = build_prompts(
        task, rows, CharTokenizer(), num_fewshot=built["num_fewshot"], max_seq_len=built["max_seq_len"]
    )
    assert len(prompts.examples) + len(prompts.skipped) == len(rows)
    for ex in prompts.examples:
        assert ex.requests and all(
            len(r.context) + len(r.continuation) <= max(built["max_seq_len"], 1) or not r.continuation
            for r in ex.requests
        ), ex
    if built.get("check"):
        assert len(prompts.examples) == 8


def test_short(tmp_path):
    fuzz(__file__, tmp_path)


@pytest.mark.slow
def test_long(tmp_path):
    fuzz(__file__, tmp_path, long=True)
