"""Reading an llm-foundry YAML (variables, overrides) and writing a `Translation` as overrides or an
experiment.

Design note: the YAML is read as llm-foundry reads it (OmegaConf, `<<:` merge keys, `${variables.x}`),
with the user's `key=value` overrides merged first, as `composer train.py YAML key=value` does. An override
whose first key is one of ours and not llm-foundry's (`trainer.device=cpu`, `data.num_workers=0`,
`parallelism=none`, `+x=y`) is passed to `train.py` after the translation instead, so it wins. Values are
written in Hydra's override grammar (strings quoted when they would parse as anything else), and the
command line is shell-quoted, so the printed command pastes as is. A string the YAML took from the
environment (`${oc.env:NAME}`) is printed as that interpolation, not its value (issue 39: the printed command
and the experiment file are records too), and `train.py` resolves it when it runs.
"""

from __future__ import annotations

import io
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from foundry.compat.llmfoundry.translate import Translation
from foundry.env_refs import env_refs
from foundry.errors import ConfigError
from stackbase.bounded import TooLarge, check_yaml_expansion

__all__ = ["OURS", "experiment_yaml", "format_value", "load_yaml", "overrides", "shell_command"]

OURS = frozenset(
    (
        "trainer",
        "data",
        "parallelism",
        "checkpoint",
        "storage",
        "logger",
        "eval",
        "task",
        "tags",
        "from_scratch",
        "experiment",
        "debug",
        "sweep",
        "hydra",
        "local",
        "hf_export",
        "peft",
    )
)
"""Top-level keys that only `train.py` has: overrides starting with them go to `train.py` as they are."""

_PLAIN = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./\-]*$")
_WORDS = {"true", "false", "null", "none", "nan", "inf"}


def _is_ours(override: str) -> bool:
    key = override.split("=", 1)[0]
    return key[:1] in "+~" or "@" in key or "/" in key or key.split(".", 1)[0] in OURS


def load_yaml(path: Path, overrides: Sequence[str] = ()) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """The YAML at `path` as plain data with the llm-foundry overrides merged and interpolations resolved.

    Returns:
        The config, and the overrides that are `train.py`'s own (passed through).

    Raises:
        ConfigError: The file is missing or not a YAML mapping, an override is not `key=value`, or an
            interpolation cannot be resolved (naming the key).
    """
    if not path.is_file():
        raise ConfigError(f"{path}: no such file; pass the path of an llm-foundry training YAML")
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value (e.g. variables.data_local=/data/c4)")
    ours = [o for o in overrides if _is_ours(o)]
    theirs = [o for o in overrides if not _is_ours(o)]
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}): not an llm-foundry YAML") from None
    # a YAML bomb (anchors x aliases) is refused before OmegaConf expands it
    try:
        check_yaml_expansion(text, source=str(path))
    except TooLarge as err:
        raise ConfigError(str(err)) from None
    try:
        cfg = OmegaConf.load(io.StringIO(text))
        if not OmegaConf.is_dict(cfg):
            raise ConfigError(f"{path}: not a mapping of llm-foundry keys")
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(theirs))
        plain = OmegaConf.to_container(cfg, resolve=True)
        from_env = {str(v): text for v, text in env_refs(cfg).values() if isinstance(v, str)}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", "") or ""
        raise ConfigError(
            f"{path}: {key[:200] or 'config'}: {' '.join(str(err).splitlines()[0].split())[:300]}"
        ) from None
    except RecursionError:
        # an interpolation that refers to itself, through others
        raise ConfigError(f"{path}: its interpolations refer to each other in a loop") from None
    assert isinstance(plain, dict)
    return {str(k): v for k, v in plain.items()}, ours, from_env


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def format_value(value: Any, env: Mapping[str, str] | None = None) -> str:
    """`value` (plain YAML) in Hydra's override grammar (`null`, `true`, `6e-4`, `[0.9,0.95]`, `{a:1}`,
    `"./{run_name}"`). A string in `env` (resolved value -> its `${oc.env:...}` text) is written as that live
    interpolation."""
    if isinstance(value, str) and env and value in env:
        return _quoted(env[value], live=True)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(format_value(v, env) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{format_value(v, env)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _WORDS and not _number(text):
        return text
    return _quoted(text)


_INTERPOLATION = re.compile(r"(\\*)\$\{")
_BEFORE_QUOTE_OR_END = re.compile(r'(\\*)("|$)')


class _Dumper(yaml.SafeDumper):
    """Quotes every string OmegaConf's loader would read as something else (`1e3`, `0E0` are floats to it,
    though PyYAML writes them plain)."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    quote = _number(text) or text.lower() in {*_WORDS, "~", "yes", "no", "on", "off", ""}
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"' if quote else None)


_Dumper.add_representer(str, _represent_str)


def _literal(value: Any, env: Mapping[str, str] | None = None) -> Any:
    """`value` (plain YAML) with every `${` in its strings escaped for OmegaConf (a YAML value that was
    literal stays so); a string in `env` becomes its live `${oc.env:...}` text."""
    if isinstance(value, str):
        if env and value in env:
            return env[value]
        return _INTERPOLATION.sub(lambda m: "\\" * (2 * len(m.group(1)) + 1) + "${", value)
    if isinstance(value, list):
        return [_literal(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _literal(v, env) for k, v in value.items()}
    return value


def _quoted(text: str, *, live: bool = False) -> str:
    """`text` as a quoted override that reads back as exactly `text` (issue 39: `C:\\data` arrived doubled and
    an escaped `${...}` came back live). Two levels: OmegaConf reads `${` as an interpolation, so a literal
    one gets an escaping backslash (and the backslashes before it are doubled); Hydra's quoted strings escape
    only quotes and the backslashes before a quote or the end, so only those are doubled. `live`: `text`'s
    interpolations stay live (an `${oc.env:...}` the YAML read)."""
    text = text if live else _literal(text)
    text = _BEFORE_QUOTE_OR_END.sub(lambda m: m.group(1) * 2 + ('\\"' if m.group(2) else ""), text)
    return f'"{text}"'


def overrides(tr: Translation) -> list[str]:
    """The `train.py` overrides: group choices, then values, then the user's own."""
    out = []
    for group, option in tr.choices.items():
        out.append(f"{group}={format_value(option) if isinstance(option, list) else option}")
    for key, value in tr.values.items():
        nested = isinstance(value, dict) or (
            isinstance(value, list) and any(isinstance(v, dict) for v in value)
        )
        # Hydra cannot replace a mapping field from the command line; `++` (add or override) can
        out.append(f"{'++' if nested else ''}{key}={format_value(value, tr.from_env)}")
    return out + list(tr.passthrough)


def shell_command(tr: Translation, *, program: str = "python train.py") -> str:
    return " ".join([program, *(shlex.quote(o) for o in overrides(tr))])


def experiment_yaml(tr: Translation, *, source: str) -> str:
    """An `experiment` file (`# @package _global_`) equal to the translated overrides; the user's own
    `train.py` overrides are listed in a comment only (pass them again after `experiment=...`)."""
    defaults: list[Any] = []
    for group, option in tr.choices.items():
        if group.startswith("+"):
            defaults.append({f"/{group[1:]}": option})
        else:
            defaults.append({f"override /{group}": option})
    body: dict[str, Any] = {"defaults": defaults}
    for key, value in tr.values.items():
        node = body
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = _literal(value, tr.from_env)
    head = [
        "# @package _global_",
        f"# Translated from {source} by `python -m foundry.compat.llmfoundry` (llm-foundry 0.22 keys).",
        *(f"# {note.line()}" for note in tr.notes),
    ]
    if tr.passthrough:
        head.append("# also given on the command line: " + " ".join(tr.passthrough))
    text = yaml.dump(body, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=110)
    return "\n".join(head) + "\n" + text
