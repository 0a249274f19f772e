"""Config values that come from the environment stay `${oc.env:NAME}` in every record (issue 39).

A run's records (`config.yaml`, `run.json`, the loggers' parameters, the command the llm-foundry translator
prints) used to hold the resolved config, so `data.remote: s3://${oc.env:BUCKET_KEY}@...` or
`${oc.env:DB_PASS}` wrote the environment's value into files that are synced, shared and uploaded; masking
by value only caught variables whose names look like a credential. Secrets by source, not by guess: the
record view resolves every interpolation except `oc.env`, so no environment value is written through one.

How: each live `${oc.env:` in a string leaf is escaped (`\\${oc.env:`, OmegaConf's literal form) in a copy of
the config, which is then resolved; a node that interpolates such a node (`${data.remote}`) therefore
records the same unresolved text; a leaf that still holds the value of a variable the config names (a
resolver that read its argument again) is recorded as written. `env_refs` lists the leaves that differ from
the run's resolution, by dotted path, so a record built from the typed config (`run.json`) can put the same
text back (`keep_env_refs`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

__all__ = ["env_refs", "escape_env", "keep_env_refs", "record_container", "resolve_recorded"]

_LIVE_ENV = re.compile(r"(?<!\\)((?:\\\\)*)\$\{oc\.env:")
"""`${oc.env:` preceded by an even number of backslashes (an odd number escapes it already)."""
_ENV_NAME = re.compile(r"\$\{oc\.env:\s*([^,}\s]+)")


def escape_env(value: Any) -> Any:
    """`value` (a plain container from `OmegaConf.to_container(resolve=False)`) with every live `${oc.env:`
    made literal."""
    if isinstance(value, str):
        return _LIVE_ENV.sub(lambda m: m.group(1) + "\\${oc.env:", value)
    if isinstance(value, Mapping):
        return {k: escape_env(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escape_env(v) for v in value]
    return value


# returns a plain container
def record_container(cfg: DictConfig | ListConfig) -> Any:
    """`cfg` resolved for a record: every interpolation but `${oc.env:...}`, which stays as written.

    A resolver that reads its argument again (`${oc.decode:${oc.env:X}}`) would still see the value, so every
    leaf that holds the value of a variable the config names afterwards is recorded as written (its raw,
    unresolved text) instead."""
    raw = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
    names = {n for v in _leaves(raw).values() if isinstance(v, str) for n in _ENV_NAME.findall(v)}
    if not names:
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    try:
        rec = OmegaConf.to_container(OmegaConf.create(escape_env(raw)), resolve=True, enum_to_str=True)
    except Exception:
        # any resolver's error: resolve as the run does, then scrub below
        rec = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    values = [v for n in names if (v := os.environ.get(n))]
    return _scrub(rec, raw, values)


def _holds(value: Any, secrets: list[str]) -> bool:
    text = str(value)
    return any(text == v or (len(v) >= 4 and v in text) for v in secrets)


def _scrub(rec: Any, raw: Any, values: list[str]) -> Any:
    if isinstance(rec, Mapping):
        raw_map = raw if isinstance(raw, Mapping) else {}
        return {k: _scrub(v, raw_map.get(k), values) for k, v in rec.items()}
    if isinstance(rec, list):
        raw_list = raw if isinstance(raw, list) and len(raw) == len(rec) else [None] * len(rec)
        return [_scrub(v, w, values) for v, w in zip(rec, raw_list)]
    if rec != raw and _holds(rec, values) and not (raw is not None and _holds(raw, values)):
        return raw if raw is not None else "***"
    return rec


def _leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, Mapping):
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(_leaves(v, f"{prefix}{k}."))
        return out
    if isinstance(tree, list):
        out = {}
        for i, v in enumerate(tree):
            out.update(_leaves(v, f"{prefix}{i}."))
        return out
    return {prefix[:-1]: tree}


def env_refs(cfg: DictConfig | ListConfig) -> dict[str, tuple[Any, str]]:
    """Dotted path -> (the run's resolved value, the recorded text) for each leaf whose value comes from the
    environment. Empty when the config names no `oc.env` (the common case: one scan, nothing resolved)."""
    raw = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
    if not any(isinstance(v, str) and _LIVE_ENV.search(v) for v in _leaves(raw).values()):
        return {}
    resolved = _leaves(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    recorded = _leaves(record_container(cfg))
    return {k: (resolved[k], v) for k, v in recorded.items() if k in resolved and v != resolved[k]}


def keep_env_refs(tree: Any, refs: Mapping[str, tuple[Any, str]]) -> Any:
    """`tree` (a plain dict of the typed config, `dataclasses.asdict`) with each `env_refs` path set back to
    its recorded text, where the tree still holds the resolved value there (a value the run derived from it
    is left alone). `tree` is not changed."""
    if not refs:
        return tree
    return _keep(tree, refs, "")


def _keep(tree: Any, refs: Mapping[str, tuple[Any, str]], prefix: str) -> Any:
    if isinstance(tree, Mapping):
        return {k: _keep(v, refs, f"{prefix}{k}.") for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return [_keep(v, refs, f"{prefix}{i}.") for i, v in enumerate(tree)]
    ref = refs.get(prefix[:-1])
    if ref is not None and str(ref[0]) == str(tree):
        return ref[1]
    return tree


def resolve_recorded(value: Any) -> Any:
    """A value read back from a record (`run.json`'s tokenizer path, for a later `generate.py` or export) with
    its `${oc.env:...}` interpolations resolved in the current environment; other values unchanged.

    Raises:
        ValueError: The interpolation cannot be resolved here (the variable is not set and has no default).
    """
    if isinstance(value, Mapping):
        return {k: resolve_recorded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_recorded(v) for v in value]
    if not isinstance(value, str) or not _LIVE_ENV.search(value):
        return value
    try:
        return OmegaConf.create({"v": value}).v
    except Exception as err:
        # OmegaConf's resolution errors
        raise ValueError(f"{value!r}: cannot be resolved here ({' '.join(str(err).split()[:20])})") from None
