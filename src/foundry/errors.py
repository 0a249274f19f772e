"""`ConfigError`, the one exception type for mistakes a user fixes, and `run_tool`, which reports them.

Design note: `train.py` prints such errors as one `error: <message>` block and exits 2 (see `foundry.cli`);
the message must name the bad key, value or file and say how to fix it. It subclasses `ValueError`, so
code that catches `ValueError` (the convention of every schema's `__post_init__`) keeps working. The
command-line tools (`scripts/*.py`, `python -m foundry.launch|runs|sync`) report the same way through
`run_tool`, which also counts `OSError` as the user's (a path that cannot be read or written, a hub name that
cannot be reached). This module imports nothing heavy, so a tool that must start fast
(`runs show`) can use it.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "EXIT_USER_ERROR",
    "ConfigError",
    "ResumeMismatch",
    "is_url",
    "os_error_message",
    "require_path",
    "run_tool",
]

EXIT_USER_ERROR = 2


class ConfigError(ValueError):
    """A bad config key or value, or a file/folder the config names that is missing."""


class ResumeMismatch(ConfigError):
    """A checkpoint cannot continue this config (another model config, another dataset or mixture).

    The run that tried to resume rewrites it into a message naming the run and the checkpoint
    (`foundry.tasks.resume_message`).

    Args:
        message: The complete message (for code that reports it as is).
        detail: What differs, without advice (`model.n_layers: checkpoint 2, config 4`).
        what: `model` or `data`.
        mixture_changed: The data's stream mixture changed (`data.on_mixture_change=continue` accepts that).
    """

    def __init__(self, message: str, *, detail: str, what: str, mixture_changed: bool = False) -> None:
        super().__init__(message)
        self.detail = detail
        self.what = what
        self.mixture_changed = mixture_changed


_WRITE_ADVICE = (
    "write elsewhere: run from another folder or set hydra.run.dir=..., checkpoint.save_folder=... or "
    "$FOUNDRY_CACHE"
)
_OS_ADVICE = {
    errno.ENOSPC: ("no space left on the device", "free space there, or " + _WRITE_ADVICE),
    errno.EDQUOT: ("disk quota exceeded", "free space there, or " + _WRITE_ADVICE),
    errno.EROFS: ("read-only file system", _WRITE_ADVICE),
    errno.EACCES: ("permission denied", "make it writable by this user, or " + _WRITE_ADVICE),
    errno.EPERM: ("operation not permitted", "make it writable by this user, or " + _WRITE_ADVICE),
    errno.ENOTDIR: ("a file stands where a folder is needed", "move that file away, or " + _WRITE_ADVICE),
    errno.EISDIR: ("is a folder where a file is needed", "remove or rename that folder"),
    errno.ENAMETOOLONG: ("file name too long", "choose a shorter run_name or folder"),
    errno.ENOENT: ("no such file or folder", "check the path"),
}
"""Operating-system errors a user fixes (a full disk, a read-only `outputs/`, a file where a folder goes):
what they mean and the fix. Any other `OSError` (a broken connection, a bad file descriptor) is not the
user's."""


def os_error_message(err: BaseException) -> str | None:
    """One line for an `OSError` the user fixes (`_OS_ADVICE`): `<path>: <what>: <fix>`; else None.

    Issue 39: a full disk during the quick-start build or a read-only `outputs/` ended in a raw traceback."""
    if not isinstance(err, OSError) or err.errno not in _OS_ADVICE:
        return None
    what, fix = _OS_ADVICE[err.errno]
    where = err.filename if err.filename is not None else "a file of this run"
    other = f" -> {err.filename2}" if err.filename2 is not None else ""
    return f"{where}{other}: {what} ([Errno {err.errno}]); {fix}"


def run_tool(main: Callable[[], int | None]) -> int:
    """Calls a command-line tool's `main` and returns its exit code (`sys.exit(run_tool(...))`).

    Returns:
        `main`'s own code (None: 0), or `EXIT_USER_ERROR` (2) after printing one `error: <message>` line for a
        user error (`ValueError`, `ConfigError`, `OSError`); `HYDRA_FULL_ERROR=1` adds the traceback. Any
        other exception is a bug and propagates with its traceback.
    """
    from stackbase.secrets import install_masked_excepthook, masked_traceback, redact_text

    # a bug's traceback (raised on from here) is printed with secrets masked
    install_masked_excepthook()
    try:
        return main() or 0
    except (ValueError, OSError) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            print(masked_traceback(err), end="", file=sys.stderr)

        # one line (runs of whitespace collapsed)
        message = os_error_message(err) or " ".join(str(err).split()) or type(err).__name__
        print(f"error: {redact_text(message)}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR


def is_url(path: str) -> bool:
    """`s3://...`, `gs://...`, `https://...`: a store read through `streaming.storage`, not a local path."""
    return "://" in path


def require_path(flag: str, value: str, *, fix: str) -> None:
    """Checks a path argument before anything is loaded; URLs are left to their store.

    Raises:
        FileNotFoundError: `<flag> <value>: no such file or folder; <fix>` when the local path is missing.
    """
    if not is_url(value) and not Path(value).expanduser().exists():
        raise FileNotFoundError(f"{flag} {value}: no such file or folder; {fix}")
