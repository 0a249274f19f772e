"""The configuration reference (docs/reference/config.md) covers every key of the typed config: each group's
schemas as `register_configs()` stores them, walked here on their own (not with the generator's walker), every
field and every nested schema's fields, each key written on the page as `group.key`."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "reference" / "config.md"


def _dataclass_in(kind: object) -> tuple[type, str] | None:
    """The schema a field holds (itself, optional, a dict value or a list item) and the key suffix."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and len(args) == 1:
        kind = args[0]
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return kind, ""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is dict and isinstance(args[1], type) and dataclasses.is_dataclass(args[1]):
        return args[1], ".<name>"
    if origin is list and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        return args[0], "[]"
    return None


def _keys(schema: type, prefix: str) -> set[str]:
    out = set()
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        key = prefix + f.name
        out.add(key)
        nested = _dataclass_in(hints[f.name])
        if nested:
            out |= _keys(nested[0], f"{key}{nested[1]}.")
    return out


def _every_key() -> set[str]:
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from foundry.config import TrainConfig, register_configs
    from foundry.launch.k8s import K8sConfig

    register_configs()
    keys: set[str] = set()
    groups = set()
    for group, entries in ConfigStore.instance().repo.items():
        if not isinstance(entries, dict) or group == "hydra":
            continue
        for node in entries.values():
            schema = OmegaConf.get_type(node.node)
            if dataclasses.is_dataclass(schema):
                groups.add(group)
                keys |= _keys(schema, f"{group}.")
    assert {"model", "data", "optimizer", "scheduler", "trainer", "eval"} <= groups
    keys |= {k for k in _keys(TrainConfig, "") if k.split(".")[0].split("[")[0] not in groups}
    keys |= _keys(K8sConfig, "k8s.")
    return keys


def test_every_key_of_the_typed_config_is_on_the_page():
    page = PAGE.read_text()
    keys = _every_key()
    assert len(keys) > 300
    missing = sorted(k for k in keys if f"`{k}`" not in page)
    assert not missing, f"not in {PAGE.relative_to(REPO)} (run `make docs`): {missing[:20]}"


def test_every_group_of_conf_has_a_section():
    page = PAGE.read_text()
    groups = [p.name for p in (REPO / "conf").iterdir() if p.is_dir() and p.name != "local"]
    assert len(groups) > 10
    missing = [g for g in groups if f"\n## {g}\n" not in page and f"\n### {g}\n" not in page]
    assert not missing, missing
