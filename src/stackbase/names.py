"""Names that become one path component (run names, job names, checkpoint folders): one rule, checked before
anything is created.

A name is refused when it is empty, `.` or `..`, holds a path separator (`/`, and `\\` which Windows and
some object stores treat as one), a NUL or another control character, or is longer than 255 bytes (the limit
of one component on every common file system). `run_name=..` used to make the run directory `outputs/..`,
writing config.yaml, run.json and checkpoints into the caller's folder (issue 39).
`child_path` joins a checked name to its parent (the run directory `outputs/<run_name>` is made with it).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MAX_NAME_BYTES", "NameError_", "check_name", "child_path", "name_problem"]

MAX_NAME_BYTES = 255


# `NameError` is a builtin
class NameError_(ValueError):
    """A name that cannot be one path component; the message names the field and the fix."""


def name_problem(name: object) -> str | None:
    """Why `name` cannot be one path component, or None when it can."""
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a name"
    if not name or not name.strip():
        return "is empty"
    if name in (".", ".."):
        return f"is {name!r}, which names a folder that already exists (the current or the parent one)"
    if "/" in name or "\\" in name:
        return "holds a path separator ('/' or '\\')"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a control character"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    return None


def check_name(name: object, *, field: str) -> str:
    """`name` when it can be one path component; else `NameError_` naming `field`,
    what is wrong and the fix."""
    problem = name_problem(name)
    if problem is not None:
        raise NameError_(
            f"{field}={name!r} {problem}: use a plain name such as my-run-1 (letters, digits, '-', '_', '.')"
        )
    return name  # type: ignore[return-value]


def child_path(parent: str | Path, name: object, *, field: str) -> Path:
    """`parent / name` with `name` checked (`check_name`): the result is always directly inside `parent`."""
    return Path(parent) / check_name(name, field=field)
