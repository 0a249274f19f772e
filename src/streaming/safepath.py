"""The path-safety rule at the path SECURITY.md names:
a re-export of ``streaming.util.safepath`` (its home)."""

from __future__ import annotations

from streaming.util.safepath import (
    UnsafeFolderError,
    UnsafePathError,
    folder_problem,
    is_safe_relpath,
    is_within,
    private_dir,
    refuse_links,
    safe_join,
    safe_relpath,
)

__all__ = [
    "UnsafeFolderError",
    "UnsafePathError",
    "folder_problem",
    "is_safe_relpath",
    "is_within",
    "private_dir",
    "refuse_links",
    "safe_join",
    "safe_relpath",
]
