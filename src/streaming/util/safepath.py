"""One path-safety rule for every file name that comes from a file we did not write.

Shard basenames in ``index.json``, file names in a checkpoint ``manifest.json``, object-store listings and
merge inputs are all *untrusted*: a crafted name such as ``../../x`` or
``/usr/lib/python3/site-packages/x.pth`` joined onto a cache folder would write, read or delete a file outside
it. Every such name passes through ``safe_relpath`` (the name alone) or ``safe_join`` (the name joined onto
its root) before anything touches the file system.

The rule: a non-empty string; ``/`` separators only (no backslash); no NUL or other control character; not
absolute, no drive letter (``C:``) and no URL scheme; no ``..`` component anywhere (even one that would cancel
out). ``.`` and empty components are dropped, so the result is the normalised POSIX form. ``safe_join`` also
checks that the joined path stays under its root after ``os.path.abspath`` normalisation.

Links: a name that passes the rule can still lead outside its root through a symbolic link inside it (a
planted ``local/sub -> /home/me``, then a shard named ``sub/notes.txt``). Whoever writes or deletes a file
under a cache or dataset folder first calls ``refuse_links``: no existing component below the root may be a
link. The root itself may be one (pointing a cache at a bigger disk is normal). Only the folder's owner can
plant a link in a private folder, so the check and the write need no atomicity against a concurrent attacker.

The same family: a *folder* we cache into is trusted only if it is ours. ``private_dir`` creates a cache
folder with mode 0700 and refuses an existing one that is not a plain directory, belongs to another user, or
that group or others may write (files planted there would be served as if we had downloaded them).
"""

from __future__ import annotations

import os
import re
import stat

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

_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_COMPONENT = 255
"""Bytes in one path component (NAME_MAX on Linux, macOS and Windows file systems)."""


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
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "it is not valid Unicode (a lone surrogate)"
    parts = name.split("/")
    if ".." in parts:
        return "it has a '..' component"
    if not [p for p in parts if p not in ("", ".")]:
        return "it names no file"
    if any(len(p.encode("utf-8")) > _MAX_COMPONENT for p in parts):
        return f"a component is longer than {_MAX_COMPONENT} bytes, the file system's limit"
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
        UnsafePathError: Naming ``source``, ``field`` and the value, before anything is read,
            written or deleted.
    """
    problem = _problem(name)
    if problem is not None:
        raise UnsafePathError(
            f"{source}: {field}={name!r:.300} is not a safe relative file name ({problem}); names in this "
            "file must be relative paths inside its folder, without '..', absolute "
            "paths, drive letters or backslashes"
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


def refuse_links(root: str | os.PathLike[str], path: str | os.PathLike[str], *, doing: str) -> None:
    """Refuse to write or delete ``path`` if any existing component of it below ``root`` is a symbolic link.

    Args:
        root: The cache or dataset folder (itself allowed to be a link).
        path: The file about to be written, replaced or deleted (or a folder about to be written into).
        doing: What was about to happen, for the message (e.g. ``download shard file``).

    Raises:
        UnsafePathError: Naming the link, where it points and the way out; nothing was touched.
    """
    root_abs = os.path.abspath(os.fspath(root))
    rel = os.path.relpath(os.path.abspath(os.fspath(path)), root_abs)
    if rel == os.curdir:
        return
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        raise UnsafePathError(f"{doing} {path}: it is outside its folder {root_abs}")
    current = root_abs
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISLNK(mode):
            raise UnsafePathError(
                f"{doing} {path}: {current} is a symbolic link (to {os.readlink(current)}); files under "
                f"{root_abs} are never written or deleted through a link, which could lead outside it. "
                "Remove the link (or replace it with a real folder), or point the "
                "dataset's local= at the real folder"
            )


class UnsafeFolderError(PermissionError):
    """A cache folder another user could have put files in; the message names it and the way out."""


def folder_problem(path: str | os.PathLike[str]) -> str | None:
    """Why an existing folder is not private to the current user (None if it is, or does not exist).

    Not private: a symlink or non-directory, owned by another uid, or writable by group or others. The
    ownership checks are skipped on platforms without POSIX uids.
    """
    getuid = getattr(os, "getuid", None)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return "is not a plain directory"
    if getuid is None:
        return None
    if st.st_uid != getuid():
        return f"is owned by uid {st.st_uid}, not by you (uid {getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def private_dir(path: str | os.PathLike[str], *, what: str, fix: str, create: bool = True) -> str:
    """``path`` checked (and, with ``create``, made with its missing parents, mode 0700) as a private folder.

    Args:
        path: The folder.
        what: How the error names it (e.g. ``default cache folder``).
        fix: What the user can do instead (e.g. ``pass local=``).
        create: Create it when absent (else only check an existing one).

    Raises:
        UnsafeFolderError: ``{what} {path} {problem}; ... {fix}``, before anything is read from it.
        OSError: If it cannot be created (the message names it and ``fix``).
    """
    folder = os.fspath(path)
    if create and not os.path.lexists(folder):
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            # the umask may have dropped bits; never widen beyond 0700
            os.chmod(folder, 0o700)
        except OSError as err:
            raise OSError(f"cannot create {what} {folder} ({err.strerror}); {fix}") from err
    problem = folder_problem(folder)
    if problem:
        raise UnsafeFolderError(
            f"{what} {folder} {problem}; files planted there would be trusted as our "
            f"own. {fix[:1].upper()}{fix[1:]}"
        )
    return folder
