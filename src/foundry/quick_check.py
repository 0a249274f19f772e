"""`train.py`'s overrides checked before anything heavy is imported (issue 40: a typo took 7-27 s to be
answered, most of it importing torch and transformers before the first check).

`check_overrides(args, conf=)` reads `conf/_keys.json` (`foundry.config_index`, built from the typed schemas)
and the option files under `conf/`, and returns one message for the first override that cannot be right: a
group option with no file (`model=mpt-tinny`), a run name that cannot be a folder (`run_name=..`), a key no
schema declares (`modle=...`, `model.d_modle=...`), or an `int`/`float`/`bool` key given a value that is none
(`model.d_model=abc`). Everything it cannot judge is left to the full check after composition: interpolations,
sweeps (`a=1,2`, `range(...)`), lists and mappings, Hydra's own keys, another `--config-dir`, schema nodes of
the ConfigStore (`trainer=_trainer`), and any key under a mapping (`variables.*`). It must never refuse what
the full check accepts (a test runs it over every `train.py` command the docs show). Standard library only.
"""

from __future__ import annotations

import difflib
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["check_overrides", "exit_on_mistake"]

_SPECIAL = ("${", ",", "(", "[", "{", "'", '"', " ")
_WORDS = {"true": True, "false": False}


def _load(conf: Path) -> dict[str, Any] | None:
    try:
        index = json.loads((conf / "_keys.json").read_text())
    except (OSError, ValueError):
        return None
    return index if isinstance(index, dict) and isinstance(index.get("keys"), dict) else None


def _options(conf: Path, group: str, folder: str) -> list[str]:
    base = conf / group / folder if folder else conf / group
    return sorted(p.stem for p in base.glob("*.yaml")) if base.is_dir() else []


def _group_problem(conf: Path, group: str, choice: str) -> str | None:
    folder, _, name = choice.rpartition("/")
    options = _options(conf, group, folder)
    # `_name`: a ConfigStore node, not a file
    if not options or name in options or name.startswith("_"):
        return None
    prefix = f"{folder}/" if folder else ""
    public = [prefix + o for o in options if not o.startswith("_")]
    close = difflib.get_close_matches(choice, public, n=1)
    hint = f": did you mean {group}={close[0]}?" if close else f": {group} has no option '{choice}'"
    return f"Could not find '{group}/{choice}'{hint} (options: {', '.join(public) or 'none'})"


def _key_problem(index: dict[str, Any], key: str, value: str) -> str | None:
    keys: dict[str, str] = index["keys"]
    if key in keys:
        return _value_problem(key, keys[key], value)
    parts = key.split(".")
    for i in range(1, len(parts)):
        if keys.get(".".join(parts[:i]), "").rstrip("?") in ("dict", "any"):
            # a free mapping (variables.*) or a node no schema types
            return None
    parent, _, name = key.rpartition(".")
    if parent and parent not in keys:
        # the first unknown part is the one to name
        return _key_problem(index, parent, "")
    head = f"unknown config key '{key}'"
    if not parent and name in index.get("llm_foundry", {}):
        return f"{head}: that is an llm-foundry key; here it is {index['llm_foundry'][name]}"
    if parent == "data" and name in index.get("llm_foundry_data", {}):
        return f"{head}: that is an llm-foundry finetuning key; {index['llm_foundry_data'][name]}"
    prefix = f"{parent}." if parent else ""
    siblings = [k[len(prefix) :] for k in keys if k.startswith(prefix) and "." not in k[len(prefix) :]]
    names = siblings + (index.get("group_only", []) if not parent else [])
    close = difflib.get_close_matches(name, names, n=1)
    if not close:
        return f"{head}; valid keys: {', '.join(sorted(siblings))}"
    example = f" (e.g. {prefix}{close[0]}={value})" if value and not any(c in value for c in _SPECIAL) else ""
    return f"{head}: did you mean '{prefix}{close[0]}'?{example}"


def _value_problem(key: str, kind: str, value: str) -> str | None:
    optional, kind = kind.endswith("?"), kind.rstrip("?")
    if kind not in ("int", "float", "bool") or any(c in value for c in _SPECIAL) or value == "":
        return None
    if value.lower() in ("null", "none", "~"):
        return None if optional else f"{key}=null: {key} cannot be null (it takes a {kind})"
    try:
        if kind == "int":
            int(value.replace("_", ""))
        elif kind == "float":
            float(value)
        elif value.lower() not in _WORDS:
            raise ValueError
    except ValueError:
        return f"{key}={value}: {key} takes {'an' if kind == 'int' else 'a'} {kind}, not {value!r}"
    return None


def _run_name_problem(args: list[str]) -> str | None:
    """`run_name=..` (or `$RUN_NAME`): a name that cannot be one folder
    (`stackbase.names`, as the full check)."""
    from stackbase.names import NameError_, check_name

    given = [a.split("=", 1)[1] for a in args if a.lstrip("+").startswith("run_name=")]
    name = given[-1] if given else os.environ.get("RUN_NAME")
    if name is None or any(c in name for c in ("${", "(", ",")):
        return None
    try:
        check_name(name, field="run_name")
    except NameError_ as err:
        return str(err)
    return None


def check_overrides(args: list[str], *, conf: Path) -> str | None:
    """The first problem among `train.py`'s overrides `args` (see the module note), or None."""
    if any(a.startswith(("--config", "-cp", "-cd", "-cn", "llmfoundry=")) for a in args):
        # another config folder (its own keys and options), or a YAML translated later
        return None
    if (problem := _run_name_problem(args)) is not None:
        return problem
    index = _load(conf)
    if index is None:
        return None
    groups = {p.name for p in conf.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if not key or key.split(".")[0] in ("hydra", "llmfoundry") or "@" in key or "/" in key:
            continue
        if key in groups:
            if not any(c in value for c in _SPECIAL) and value not in ("", "null"):
                problem = _group_problem(conf, key, value)
                if problem is not None:
                    return problem
            continue
        problem = _key_problem(index, key, value)
        if problem is not None:
            return problem
    return None


def exit_on_mistake(args: list[str], *, conf: Path) -> None:
    """Prints `error: <problem>` and exits 2 when `check_overrides` finds one; `HYDRA_FULL_ERROR=1` skips it
    (the full check then reports the mistake with its traceback)."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        return
    problem = check_overrides(args, conf=conf)
    if problem is not None:
        from stackbase.secrets import redact_text

        print(f"error: {redact_text(problem)}", file=sys.stderr, flush=True)
        raise SystemExit(2)
