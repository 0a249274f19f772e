"""The index of every config key (`conf/_keys.json`), built from the typed schemas, for checks that must not
import them (issue 40: a config mistake took 7-27 s to be answered, most of it importing torch before the
first check).

`build_index()` walks `TrainConfig`: every dataclass field by dotted key with its type, and for a field typed
by a base schema (`model`, `data`, `optimizer`, `scheduler`, ...) the fields of every schema that can stand
there (the union: `model.rope_theta` is valid because some model schema has it). A `dict` field admits any key
below it (`variables.*`). `make config-index` writes the file; a test fails when it is out of date. The reader
is `foundry.quick_check` (standard library only).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

__all__ = ["INDEX_NAME", "build_index", "index_text"]

INDEX_NAME = "_keys.json"
"""The index's file name in the config folder (`conf/_keys.json`; Hydra reads only `.yaml` files there)."""


def _schemas_for(kind: Any) -> list[type]:
    """The dataclasses a field of type `kind` may hold (a base schema's subclasses too), else []."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return [s for arg in typing.get_args(kind) for s in _schemas_for(arg)]
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        found, todo = [], [kind]
        while todo:
            schema = todo.pop()
            if schema not in found:
                found.append(schema)
                todo.extend(schema.__subclasses__())
        return found
    return []


def _type_name(kind: Any) -> str:
    """`int`, `float`, `bool`, `str`, `dict`, `list`, `node` (a schema) or `any`, for the quick check."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and len(args) == 1:
        return _type_name(args[0]) + "?"
    if kind in (int, float, bool, str):
        return kind.__name__
    if typing.get_origin(kind) is dict or kind is dict:
        return "dict"
    if typing.get_origin(kind) is list or kind is list:
        return "list"
    return "node" if _schemas_for(kind) else "any"


def _walk(schema: type, prefix: str, keys: dict[str, str], seen: set[tuple[type, str]]) -> None:
    if (schema, prefix) in seen:
        return
    seen.add((schema, prefix))
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        key, kind = f"{prefix}{f.name}", hints.get(f.name, Any)
        name = _type_name(kind)
        # two schemas give the key different types: check none
        if keys.get(key, name) != name:
            name = "any"
        keys[key] = name
        for sub in _schemas_for(kind):
            _walk(sub, f"{key}.", keys, seen)


def build_index() -> dict[str, Any]:
    """`{"keys": {dotted key: type name}}` for every key `train.py` accepts (imports every schema), with the
    tables `foundry.config` words its suggestions from (group-only keys, llm-foundry keys)."""
    from foundry.config import (
        GROUP_ONLY_KEYS,
        LLM_FOUNDRY_FINETUNE_KEYS,
        LLM_FOUNDRY_KEYS,
        TrainConfig,
        register_configs,
    )
    from foundry.data.config import FinetuneDataConfig, TextDataConfig

    # the registries of model/optimizer/... schemas are filled on registration
    register_configs()
    keys: dict[str, str] = {}
    _walk(TrainConfig, "", keys, set())
    for schema in (*_schemas_for(TextDataConfig), *_schemas_for(FinetuneDataConfig)):
        # `data` is typed Any for OmegaConf (no unions): its schemas here
        _walk(schema, "data.", keys, set())
    return {
        "keys": dict(sorted(keys.items())),
        "group_only": sorted(GROUP_ONLY_KEYS),
        "llm_foundry": LLM_FOUNDRY_KEYS,
        "llm_foundry_data": LLM_FOUNDRY_FINETUNE_KEYS,
    }


def index_text() -> str:
    """The file's content: `build_index()` as sorted, indented JSON."""
    return json.dumps(build_index(), indent=1, sort_keys=True) + "\n"


def write_index(conf: str | Path) -> Path:
    """Writes `<conf>/_keys.json`; returns its path."""
    path = Path(conf) / INDEX_NAME
    path.write_text(index_text())
    return path
