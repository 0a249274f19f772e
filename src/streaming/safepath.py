"""One path-safety rule for every file name that comes from a file we did not write.

Shard basenames in ``index.json``, file names in a checkpoint ``manifest.json``, object-store listings and merge
inputs are all *untrusted*: a crafted name such as ``../../x`` or ``/usr/lib/python3/site-packages/x.pth`` joined
onto a cache folder would write, read or delete a file outside it. Every such name passes through
``safe_relpath`` (the name alone) or ``safe_join`` (the name joined onto its root) before anything touches the
file system.

The rule: a non-empty string; ``/`` separators only (no backslash); no NUL or other control character; not
absolute, no drive letter (``C:``) and no URL scheme; no ``..`` component anywhere (even one that would cancel
out). ``.`` and empty components are dropped, so the result is the normalised POSIX form. ``safe_join`` also
checks that the joined path stays under its root after ``os.path.abspath`` normalisation.
"""

from __future__ import annotations

import os
import re

__all__ = ["UnsafePathError", "is_safe_relpath", "is_within", "safe_join", "safe_relpath"]

_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class UnsafePathError(ValueError):
    """An untrusted file name that would leave its root; the message names the file, field and value."""


def _problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"expected a string, got {type(name).__name__}"
    if not name:
        return "the name is empty"
    if _CONTROL.search(name):
        return "it contains a control character"
    if "\\" in name:
        return "it contains a backslash (use '/' separators)"
    if name.startswith("/"):
        return "it is an absolute path"
    if _DRIVE.match(name):
        return "it starts with a drive letter"
    if "://" in name:
        return "it is a URL, not a relative name"
    parts = name.split("/")
    if ".." in parts:
        return "it has a '..' component"
    if not [p for p in parts if p not in ("", ".")]:
        return "it names no file"
    return None


def is_safe_relpath(name: object) -> bool:
    """True if ``name`` passes the rule (see the module docstring)."""
    return _problem(name) is None


def is_within(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> bool:
    """True if ``path`` lies strictly under ``root`` after ``os.path.abspath`` normalisation (symlinks are not
    resolved)."""
    root_abs = os.path.abspath(os.fspath(root))
    path_abs = os.path.abspath(os.fspath(path))
    return path_abs != root_abs and os.path.commonpath([root_abs, path_abs]) == root_abs


def safe_relpath(name: object, *, source: str, field: str) -> str:
    """The normalised relative POSIX form of an untrusted ``name``.

    Args:
        name: The value read from the untrusted file.
        source: The file (path or URL) the value came from, for the error message.
        field: The field that held it (e.g. ``shards[3].raw_data.basename``).

    Raises:
        UnsafePathError: Naming ``source``, ``field`` and the value, before anything is read, written or deleted.
    """
    problem = _problem(name)
    if problem is not None:
        raise UnsafePathError(
            f"{source}: {field}={name!r} is not a safe relative file name ({problem}); names in this file must "
            "be relative paths inside its folder, without '..', absolute paths, drive letters or backslashes"
        )
    assert isinstance(name, str)
    return "/".join(p for p in name.split("/") if p not in ("", "."))


def safe_join(root: str | os.PathLike[str], name: object, *, source: str, field: str) -> str:
    """``root/name`` for an untrusted ``name``, verified to stay under ``root``.

    Raises:
        UnsafePathError: If ``name`` breaks the rule or the joined path leaves ``root``.
    """
    rel = safe_relpath(name, source=source, field=field)
    if not is_within(root, os.path.join(os.path.abspath(os.fspath(root)), rel)):
        raise UnsafePathError(
            f"{source}: {field}={name!r} resolves outside its folder {os.path.abspath(os.fspath(root))}"
        )
    return os.path.join(os.fspath(root), rel)
