"""Preprocessing functions: map a dataset's own columns to a prompt/response or chat row.

Design note: `data.preprocessing_fn` is either a name in `PREPROCESSORS` (an explicit table, filled by this
module's definitions, not by import side effects elsewhere) or `module.path:function` (imported on demand,
so user code needs no registration). The shipped ones follow llm-foundry's field conventions: `alpaca`
(tatsu-lab/alpaca's `text` split at `### Response:`) and `dolly` (instruction/input/output in the Alpaca
prompt template, as llm-foundry's `HuggingFaceH4/databricks_dolly_15k`). `mosaicml/dolly_hhrlhf` itself
already has `prompt`/`response` columns and needs none. When a dataset's HF name has a registered
function and `preprocessing_fn` is unset, that function is used (llm-foundry does the same).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["PREPROCESSORS", "Preprocessor", "alpaca", "dolly", "resolve_preprocessing_fn"]

Preprocessor = Callable[[Mapping[str, Any]], Mapping[str, Any]]

DOLLY_PROMPT = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the "
    "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"
)


def alpaca(row: Mapping[str, Any]) -> dict[str, str]:
    """tatsu-lab/alpaca: the `text` column holds prompt and answer around `### Response:`."""
    text = row.get("text")
    if not isinstance(text, str) or text.count("### Response:") != 1:
        raise ValueError("alpaca rows need a 'text' string with exactly one '### Response:' marker")
    prompt, response = text.split("### Response:")
    return {"prompt": prompt + "### Response:", "response": response}


def dolly(row: Mapping[str, Any]) -> dict[str, str]:
    """databricks-dolly-15k style rows (`instruction`, `input`, `output`) in the Alpaca prompt template."""
    try:
        instruction = row["instruction"] + ("\n" + row["input"] if row["input"] != "" else "")
        return {"prompt": DOLLY_PROMPT.format(instruction=instruction), "response": row["output"]}
    except (KeyError, TypeError) as err:
        raise ValueError(
            f"dolly rows need string 'instruction', 'input' and 'output' columns ({err})"
        ) from err


PREPROCESSORS: dict[str, Preprocessor] = {
    "alpaca": alpaca,
    "tatsu-lab/alpaca": alpaca,
    "dolly": dolly,
    "HuggingFaceH4/databricks_dolly_15k": dolly,
}


def resolve_preprocessing_fn(name: str | None, *, dataset: str | None = None) -> Preprocessor | None:
    """`name` (registered, or `module.path:function`) -> the function;
    None when neither it nor `dataset` has one.

    Raises:
        ValueError: An unknown name, or a `module:function` that cannot be imported, saying what exists.
    """
    if name is None:
        return PREPROCESSORS.get(dataset) if dataset is not None else None
    if name in PREPROCESSORS:
        return PREPROCESSORS[name]
    if ":" not in name:
        raise ValueError(
            f"data.preprocessing_fn={name!r} is not registered (known: {sorted(PREPROCESSORS)}); or give "
            "'module.path:function' for your own"
        )
    module, _, attr = name.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(
            f"data.preprocessing_fn={name!r}: cannot import {attr!r} from {module!r} ({err})"
        ) from err
    if not callable(fn):
        raise ValueError(f"data.preprocessing_fn={name!r} is not callable")
    return fn
