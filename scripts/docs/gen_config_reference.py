"""Writes docs/reference/config.md, the configuration reference, from the typed schemas.

Design note: the schemas are the one source. `foundry.config.register_configs()` stores every group's schema
node in Hydra's ConfigStore (`model/_mpt`, `trainer/_trainer`, ...); this script walks the root `TrainConfig`,
then each stored node's dataclass, field by field and into nested dataclasses (`model.attn_config.*`,
`data.streams.<name>.*`), with the field's type, its default and its help text: the string literal right after
the field in the schema's source (an attribute docstring, read with `ast`; a subclass inherits its base's).
The group's option files in `conf/` are listed with their first comment line and the schema they build on.
`make docs` runs it; tests/docs/test_config_reference.py checks that every key is on the page and that the
committed page is what this script writes.

    python scripts/docs/gen_config_reference.py [--out docs/reference/config.md]
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import inspect
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
OUT = REPO / "docs" / "reference" / "config.md"

GROUP_ORDER = [
    "model", "tokenizer", "data", "optimizer", "scheduler", "trainer", "parallelism", "checkpoint", "storage",
    "logger", "callbacks", "eval",
]  # fmt: skip
PATCH_GROUPS = {
    "experiment": "whole-run recipes (`# @package _global_`): each sets several groups and keys at once",
    "debug": "debugging patches (`# @package _global_`) applied on top of the run",
    "sweep": "multirun sweeps (`# @package _global_`, `hydra.mode: MULTIRUN`): `python train.py sweep=<name>`",
    "peft": "adds `model.peft_config` (`+peft=lora`); its keys are listed under `model` above",
    "hf_export": "adds `callbacks.hf_export` (`+hf_export=default`); its keys are listed under `callbacks` above",
    "hydra": "Hydra's own settings: run and sweep folders, job logging, launchers (`hydra/launcher=slurm`)",
}


@dataclass(frozen=True)
class Key:
    """One documented key: its dotted name, type, default and help text."""

    name: str
    type: str
    default: str
    help: str


def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of `cls`'s own fields: the string literal right after each annotated field."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
    if node is None:
        return {}
    docs: dict[str, str] = {}
    body = node.body
    for stmt, after in zip(body, body[1:]):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


def help_text(cls: type, name: str) -> str:
    """The docstring of field `name` from `cls` or, when `cls` has none, the nearest base that has one."""
    for klass in cls.__mro__:
        if dataclasses.is_dataclass(klass):
            doc = field_docs(klass).get(name)
            if doc:
                return doc
    return ""


def _strip_optional(kind: Any) -> tuple[Any, bool]:  # a type annotation
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return args[0], True
    return kind, False


def type_name(kind: Any) -> str:  # a type annotation
    """A short readable name: `int`, `str or null`, `list[str]`, `dict[str, StreamConfig]`, `TimeUnit (a, b)`."""
    inner, optional = _strip_optional(kind)
    if optional:
        return f"{type_name(inner)} or null"
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) if a is not type(None) else "null" for a in typing.get_args(kind))
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(kind))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if kind is Any:
        return "any"
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return f"{kind.__name__} ({', '.join(str(m.value) for m in kind)})"
    if isinstance(kind, type):
        return kind.__name__
    return str(kind).replace("typing.", "")


def _yaml_value(value: Any) -> str:  # any default
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, str):
        return (
            value
            if value and value.strip() == value and value not in ("null", "true", "false")
            else repr(value)
        )
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def default_text(f: dataclasses.Field) -> str:
    """The default as YAML writes it, `(required)` for a mandatory field, `(below)` for a nested schema."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    if dataclasses.is_dataclass(value):
        return "(below)"
    if isinstance(value, str) and value == "???":
        return "(required)"
    return f"`{_yaml_value(value)}`"


def nested_schema(kind: Any) -> tuple[type, str] | None:  # a type annotation
    """(schema, key suffix) when `kind` holds dataclasses: `X`/`X | None` -> '', dict[str, X] -> '.<name>',
    list[X] -> '[]'."""
    inner, _ = _strip_optional(kind)
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        return inner, ""
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    if origin is dict and len(args) == 2 and isinstance(args[1], type) and dataclasses.is_dataclass(args[1]):
        return args[1], ".<name>"
    if origin is list and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        return args[0], "[]"
    return None


def walk(schema: type, prefix: str) -> Iterator[Key]:
    """Every key of `schema` under `prefix` (`model.`), depth first, nested schemas after their field."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        kind = hints[f.name]
        name = f"{prefix}{f.name}"
        yield Key(name, type_name(kind), default_text(f), help_text(schema, f.name))
        nested = nested_schema(kind)
        if nested is not None:
            yield from walk(nested[0], f"{name}{nested[1]}.")


def stored_schemas() -> dict[str, dict[str, type]]:
    """{group: {node name: dataclass}} from Hydra's ConfigStore after `register_configs()` (plus the root)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from foundry.config import register_configs

    register_configs()
    out: dict[str, dict[str, type]] = {}
    for group, entries in ConfigStore.instance().repo.items():
        if not isinstance(entries, dict) or group == "hydra":
            continue
        for name, node in entries.items():
            schema = OmegaConf.get_type(node.node)
            if isinstance(schema, type) and dataclasses.is_dataclass(schema):
                out.setdefault(group, {})[name.removesuffix(".yaml")] = schema
    return out


def extra_schemas() -> dict[str, dict[str, type]]:
    """Config groups read by a tool rather than `train.py` (not in the ConfigStore)."""
    from foundry.launch.config import K8sConfig

    return {"k8s": {"default": K8sConfig}}


def _defaults(path: Path) -> list[str]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        return []
    found = []
    for item in data.get("defaults", []) if isinstance(data, dict) else []:
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict) and len(item) == 1:
            (key,) = item
            if not str(key).startswith(("override", "/")):
                found.append(f"{key}")
    return found


def _description(path: Path) -> str:
    """The option file's opening comment, up to its first blank or indented (example) line: one paragraph.

    Bracketed optional overrides of an example command (`[hydra.sweeper.n_trials=20]`) are left out: the
    documented commands are checked as written (tests/foundry/test_quick_check.py)."""
    found: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line[1:]
        if text.strip().startswith("@package"):
            continue
        if not text.strip() or text.startswith("   "):
            if found:
                break
            continue
        found.append(text.strip())
    return re.sub(r"\s*\[[^\]]*=[^\]]*\]", "", " ".join(found))


def options(group: str) -> list[tuple[str, str, str]]:
    """(option, schema node or base option it builds on, description) for every file of `conf/<group>/`."""
    folder = CONF / group
    if not folder.is_dir():
        return []
    rows = []
    for path in sorted(folder.rglob("*.yaml")):
        option = path.relative_to(folder).with_suffix("").as_posix()
        if path.parent.name == "local":
            continue
        bases, streams = [], []
        for entry in _defaults(path):
            name, _, target = entry.partition("@")
            name = name.rpartition("/")[2] if name.startswith("/") else name
            if name == "_self_":
                continue
            if target.startswith("streams."):
                streams.append(target.removeprefix("streams."))
            else:
                bases.append(f"`{name}`")
        if streams:
            bases.append("streams " + ", ".join(f"`{s}`" for s in streams))
        rows.append((option, ", ".join(bases), _description(path)))
    return rows


def _cell(text: str) -> str:
    """Table-cell text: one line, bare `|` and `<` escaped (code spans are left alone)."""
    out, in_code = [], False
    for part in text.replace("\n\n", "<br>").replace("\n", " ").split("`"):
        out.append(part if in_code else part.replace("|", "\\|").replace("<", "&lt;"))
        in_code = not in_code
    return "`".join(out).strip()


def key_table(keys: list[Key]) -> list[str]:
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for k in keys:
        lines.append(f"| `{k.name}` | {_cell(k.type)} | {_cell(k.default)} | {_cell(k.help)} |")
    return lines


def _schema_heading(group: str, node: str, schema: type) -> str:
    return f"### `{group}={node}`: {schema.__name__}" if node.startswith("_") else f"### {schema.__name__}"


def render() -> str:
    from foundry.config import TrainConfig

    stored = stored_schemas()
    stored.pop("train_schema", None)
    extra = extra_schemas()
    root_groups = {f.name for f in dataclasses.fields(TrainConfig) if nested_or_group(f.name, stored)}
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by scripts/docs/gen_config_reference.py from the typed schemas: do not edit by hand;"
        " run `make docs`. -->",
        "",
        "Every key `python train.py` accepts, group by group, with its type, its default (the schema's; the",
        "option files of `conf/` set their own values on top) and its help text, generated from the typed",
        "schemas (`foundry.config.register_configs`). Set a key with `group.key=value` and pick an option file",
        "with `group=option` ([Training](../guides/training.md) explains the grammar). A key that no schema",
        "declares, or a value of the wrong type, is refused before anything runs, naming the closest key.",
        "",
        "`(required)` marks a key without a default (an option file or the command line must set it);",
        "`(below)` a nested schema, whose keys follow; `<name>` a key you choose (`data.streams.<name>.*`);",
        "`[]` an item of a list (`eval.icl_tasks[].label`).",
        "",
        "## Run-level keys",
        "",
        "The root schema `TrainConfig` (`conf/train.yaml`). The config groups are its other fields, below.",
        "",
    ]
    run_keys = []
    for key in walk(TrainConfig, ""):
        top = key.name.split(".", 1)[0].split("[", 1)[0]
        if top in root_groups:
            continue
        run_keys.append(key)
    lines += key_table(run_keys)
    groups = [g for g in GROUP_ORDER if g in stored] + sorted(set(stored) - set(GROUP_ORDER))
    for group in groups:
        lines += ["", f"## {group}", ""]
        doc = help_text(TrainConfig, group)
        if doc:
            lines += [_cell(doc), ""]
        lines += _options_table(group)
        for node, schema in stored[group].items():
            lines += ["", _schema_heading(group, node, schema), ""]
            lines += [f"`{schema.__module__}.{schema.__qualname__}`" + _first_doc_line(schema), ""]
            lines += key_table(list(walk(schema, f"{group}.")))
    for group, nodes in extra.items():
        lines += ["", f"## {group}", ""]
        lines += [
            f"Read by `python -m foundry.launch.{group}`, not by `train.py`: pick a file with `{group}=<name>`,",
            f"override keys with `{group}.<key>=<value>`.",
            "",
        ]
        lines += _options_table(group)
        for _, schema in nodes.items():
            lines += ["", f"### {schema.__name__}", ""]
            lines += [f"`{schema.__module__}.{schema.__qualname__}`" + _first_doc_line(schema), ""]
            lines += key_table(list(walk(schema, f"{group}.")))
    lines += ["", "## Patch groups", "", "Groups that pick files but hold no keys of their own.", ""]
    for group, what in PATCH_GROUPS.items():
        lines += [f"### {group}", "", f"`{group}=<option>`: {what}.", ""]
        lines += _options_table(group)
        lines += [""]
    return "\n".join(lines).rstrip() + "\n"


def nested_or_group(name: str, stored: dict[str, dict[str, type]]) -> bool:
    return name in stored


def _first_doc_line(schema: type) -> str:
    doc = inspect.getdoc(schema) or ""
    if not doc or doc.startswith(f"{schema.__name__}("):
        return ""
    return ": " + _cell(doc.split("\n\n", 1)[0])


def _options_table(group: str) -> list[str]:
    rows = options(group)
    if not rows:
        return []
    lines = [f"Options (`conf/{group}/`):", "", "| option | builds on | description |", "|---|---|---|"]
    for option, bases, description in rows:
        lines.append(f"| `{option}` | {bases} | {_cell(description)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the page to write (default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render())
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
