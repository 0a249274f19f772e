"""The limits on untrusted input, each with a default and an environment variable to raise it (issue 39: "a
limit in config where a user could need more").

The readers of untrusted files (`stackbase.bounded` and its callers in `streaming` and `foundry`) take their
limits from `limit(NAME)`, which reads `FOUNDRY_MAX_<NAME>` at call time (no state kept here), so one variable
serves `train.py`, every tool and the standalone `streaming` library alike, and a refusal's message names the
variable that allows more (`hint(NAME)`). A value that is not a positive number is a user error naming it.
"""

from __future__ import annotations

import os

__all__ = ["LIMITS", "hint", "limit"]

LIMITS: dict[str, tuple[int, str]] = {
    "LINE_MB": (16, "MiB in one line of an ICL task or data file (an ICL row is a few KB)"),
    "JSON_MB": (512, "MiB in one JSON file (index.json, a checkpoint manifest, a run record)"),
    "JSON_DEPTH": (100, "levels of nested JSON arrays and objects (index.json nests under 10)"),
    "YAML_NODES": (10_000, "YAML nodes once aliases are expanded (llm-foundry's largest recipe has 229)"),
    "YAML_DEPTH": (64, "levels of nested YAML"),
    "ZIP_RATIO": (
        200,
        "times its stored size a compressed zip record may declare (torch stores records raw)",
    ),
    "PICKLE_MB": (1024, "MiB of a Composer checkpoint's pickle (tensor data is not in it)"),
}
"""Name -> (default, what it bounds)."""

PREFIX = "FOUNDRY_MAX_"


def limit(name: str) -> int:
    """The limit `name` (a key of `LIMITS`): `$FOUNDRY_MAX_<name>` when set, else the default.

    Raises:
        ValueError: The variable is set to something other than a positive whole number
            (named in the message).
    """
    default, _ = LIMITS[name]
    text = os.environ.get(PREFIX + name, "").strip()
    if not text:
        return default
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{PREFIX}{name}={text!r}: use a positive whole number (default {default})")
    return value


def hint(name: str) -> str:
    """How to allow more: `if the file is trusted, raise the limit with FOUNDRY_MAX_<name>=<more> (now N)`."""
    return f"if the file is trusted, raise the limit with {PREFIX}{name}=<more> (now {limit(name)})"
