"""Reading a run folder's records as untrusted input (issue 39): anyone who can write a run folder (a shared
`outputs/`, a synced bucket) decides what `python -m foundry.runs` reads.

Every JSON record goes through `stackbase.bounded.parse_json` (UTF-8, nesting capped) and must have the shape
its reader expects: `record` gives a dict (its nested mappings only where they are mappings) or `{}`, `rows`
the dict lines of a JSONL file, `yaml_list` the strings of a YAML list (Hydra's `overrides.yaml`, read with
the safe loader, its alias expansion bounded first). A damaged or foreign record reads as missing, so
`runs list` still lists the other runs; what a command cannot do without it is one error line naming the run
(`DamagedRun`).
"""

from __future__ import annotations

from typing import Any

from stackbase.bounded import TooLarge, check_yaml_expansion, parse_json

__all__ = ["DamagedRun", "record", "rows", "yaml_list"]


class DamagedRun(ValueError):
    """A run folder whose records a command needs cannot be read (the message names the run and the file)."""


def record(text: str | None, *, source: str, mappings: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON object in `text` (`{}` when absent, not JSON, too deep or not an object); each key in
    `mappings` is kept only when its value is an object too."""
    if not text:
        return {}
    try:
        value = parse_json(text, source=source)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if k not in mappings or isinstance(v, dict)}


def rows(text: str | None, *, source: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL text; a torn, broken, too deep or non-object line is skipped."""
    out = []
    for line in (text or "").splitlines():
        try:
            rec = parse_json(line, source=source)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def yaml_list(text: str | None, *, source: str) -> list[str] | None:
    """The strings of the YAML list in `text` (None when absent); a YAML that is not a list of plain values is
    a `DamagedRun`."""
    import yaml

    if text is None:
        return None
    try:
        check_yaml_expansion(text, source=source)
        value = yaml.safe_load(text)
    except (TooLarge, yaml.YAMLError, RecursionError, UnicodeError) as err:
        raise DamagedRun(f"{source}: not a list of overrides ({type(err).__name__})") from None
    if value is None:
        return []
    if not isinstance(value, list) or any(isinstance(v, dict | list) for v in value):
        raise DamagedRun(f"{source}: not a list of overrides")
    return [str(v) for v in value]
