"""Every config group's schema has one home: the `config.py` of the component package that reads it (issue 44).

The groups are the folders of `conf/` (less the ones that only pick files). A group's schema classes are
found, not listed: the nodes `register_configs()` stores in Hydra's ConfigStore for it (what its option files
extend), the `TrainConfig` field of the same name, the node a `# @package <key>` header fills (`peft` fills
`model.peft_config`, `hf_export` fills `callbacks.hf_export`), and, for a group a tool reads instead of
`train.py`, `TOOL_SCHEMAS`. A new folder under `conf/` without a schema fails here, and so does a schema
registered from any module other than its group's `config.py`, or a nested schema defined outside it.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import types
import typing
from pathlib import Path

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from foundry.config import GROUP_ONLY_KEYS, TrainConfig, register_configs
from foundry.launch.config import K8sConfig

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
ROOT_CONFIG = REPO / "src" / "foundry" / "config.py"
FILE_GROUPS = {*GROUP_ONLY_KEYS, "hydra"}
"""Groups that only pick files (`# @package _global_` patches, Hydra's own settings): no schema."""
TOOL_SCHEMAS: dict[str, type] = {"k8s": K8sConfig}
"""Groups read by a tool rather than composed by `train.py` (so not in the ConfigStore): group -> schema."""
NESTED_ELSEWHERE: dict[type, str] = {}
"""Nested schemas allowed outside their group's module, with the reason (none now)."""


def _groups() -> list[str]:
    return sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name not in FILE_GROUPS)


def _dataclasses_in(kind: object) -> list[type]:
    """The dataclasses a type annotation names (inside `X | None`, `list[X]`, `dict[str, X]`)."""
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return [kind]
    if typing.get_origin(kind) in (typing.Union, types.UnionType, list, dict, tuple):
        return [d for arg in typing.get_args(kind) for d in _dataclasses_in(arg)]
    return []


def _field_schemas(schema: type, name: str) -> list[type]:
    kind = typing.get_type_hints(schema).get(name)
    return _dataclasses_in(kind) if kind is not None else []


def _node_schemas(key: str) -> list[type]:
    """The schemas of the dotted node `key` of `TrainConfig` (`model.peft_config` -> `PeftConfig`)."""
    found = [TrainConfig]
    for name in key.split("."):
        found = [s for schema in found for s in _field_schemas(schema, name)]
        found += [sub for s in found for sub in _subclasses(s)]
    return found


def _subclasses(schema: type) -> list[type]:
    out, todo = [], list(schema.__subclasses__())
    while todo:
        sub = todo.pop()
        out.append(sub)
        todo.extend(sub.__subclasses__())
    return out


def _package_targets(group: str) -> set[str]:
    """The nodes the group's option files fill by a `# @package <key>` header (other than the group itself)."""
    targets = set()
    for path in (CONF / group).glob("*.yaml"):
        first = path.read_text().splitlines()[:1]
        if first and first[0].startswith("# @package "):
            key = first[0].removeprefix("# @package ").strip()
            if key not in ("_global_", "_group_", group):
                targets.add(key)
    return targets


def _nodes(entries: dict) -> list[object]:
    """The config nodes stored under a ConfigStore group, its subgroups (nested dicts) included."""
    found = []
    for entry in entries.values():
        found.extend(_nodes(entry) if isinstance(entry, dict) else [entry.node])
    return found


def _stored() -> dict[str, set[type]]:
    """Top-level group -> the dataclasses of the nodes `register_configs()` stores for it."""
    register_configs()
    out: dict[str, set[type]] = {}
    for group, entries in ConfigStore.instance().repo.items():
        if isinstance(entries, dict):
            for node in _nodes(entries):
                schema = OmegaConf.get_type(node)
                if isinstance(schema, type) and dataclasses.is_dataclass(schema):
                    out.setdefault(group, set()).add(schema)
    return out


def _schemas(group: str, stored: dict[str, set[type]]) -> set[type]:
    """Every schema class typing `conf/<group>/`, with the dataclass bases it extends."""
    found = set(stored.get(group, ()))
    found.update(_field_schemas(TrainConfig, group))
    for key in _package_targets(group):
        found.update(_node_schemas(key))
    if group in TOOL_SCHEMAS:
        found.add(TOOL_SCHEMAS[group])
    return {base for schema in found for base in schema.__mro__ if dataclasses.is_dataclass(base)}


@pytest.fixture(scope="module")
def homes() -> dict[str, str]:
    """Group -> the one module its schemas are defined in (checked by the first test)."""
    stored = _stored()
    return {group: min(s.__module__ for s in _schemas(group, stored)) for group in _groups()}


def test_every_group_has_one_config_module():
    stored = _stored()
    problems = []
    for group in _groups():
        schemas = _schemas(group, stored)
        modules = sorted({s.__module__ for s in schemas})
        if not schemas:
            problems.append(
                f"conf/{group}/ has no schema: define it in <package>/config.py and register its node in "
                "foundry.config.register_configs (a tool's group: TOOL_SCHEMAS here)"
            )
        elif len(modules) != 1:
            where = ", ".join(
                f"{s.__name__} in {s.__module__}" for s in sorted(schemas, key=lambda s: s.__name__)
            )
            problems.append(
                f"conf/{group}/ has schemas in {len(modules)} modules ({where}): move them into one"
            )
    assert problems == [], "\n".join(problems)


def test_each_group_module_is_a_packages_config_py(homes):
    problems = []
    for group, module in homes.items():
        path = Path(str(importlib.import_module(module).__file__))
        package = path.parent
        if path.name != "config.py" or not (package / "__init__.py").is_file() or module == "foundry.config":
            problems.append(
                f"conf/{group}/: its schemas live in {module} ({path}), not in <package>/config.py"
            )
    assert problems == [], "\n".join(problems)


def test_nested_schemas_live_in_a_group_module(homes):
    group_modules = set(homes.values())
    stored = _stored()
    problems = []
    for group in _groups():
        seen: set[type] = set()
        todo = list(_schemas(group, stored))
        while todo:
            schema = todo.pop()
            if schema in seen:
                continue
            seen.add(schema)
            for f in dataclasses.fields(schema):
                for nested in _field_schemas(schema, f.name):
                    nested_all = [nested, *_subclasses(nested)]
                    todo.extend(nested_all)
                    for cls in nested_all:
                        if cls.__module__ not in group_modules and cls not in NESTED_ELSEWHERE:
                            problems.append(
                                f"{group}: {schema.__name__}.{f.name} is {cls.__name__}, defined in "
                                f"{cls.__module__}: move it to {homes[group]}"
                            )
    assert problems == [], "\n".join(sorted(set(problems)))


def test_root_config_imports_each_field_groups_module_in_one_block(homes):
    """`foundry.config` imports the schema module of every group `TrainConfig` has a field for, in one block
    (the index); the groups filling a node of another (`peft`, `hf_export`) come through their parent's."""
    tree = ast.parse(ROOT_CONFIG.read_text())
    imports = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module]
    schema_lines = [n.lineno for n in imports if n.module in homes.values()]
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert {n.module for n in imports if n.module in homes.values()} == {
        module for group, module in homes.items() if group in fields
    }
    others = [n.lineno for n in imports if n.module not in homes.values()]
    assert not any(min(schema_lines) < line < max(schema_lines) for line in others)
