"""How `train.py` reports errors: a user error is one `error: <message>` block and exit code 2; a bug keeps
its traceback.

User errors are what the person at the keyboard fixes in the command line or the config files: Hydra's own
composition errors (a bad override, an unknown group option, a parse error: `CompactHydraException`),
OmegaConf's (a wrong type, a missing `???` value, an unresolvable interpolation), `ValueError` (every schema's
`__post_init__` check, `foundry.errors.ConfigError`, a tokenizer that cannot be found) and
`FileNotFoundError` (a dataset that has not been created yet), and the operating system's errors the user
fixes (a full disk, a read-only or unwritable folder, a file where a folder goes:
`foundry.errors.os_error_message`). Everything else is a bug and propagates with its traceback.
`HYDRA_FULL_ERROR=1` shows the traceback of user errors too. The command-line tools (`scripts/*.py`,
`python -m foundry.launch|runs|sync`) report the same way through `foundry.errors.run_tool`, which imports
neither Hydra nor torch.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any

from hydra.errors import CompactHydraException, ConfigCompositionException, MissingConfigException
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    InterpolationResolutionError,
    OmegaConfBaseException,
)

from foundry.config import KEY_RULE, group_option_message, unknown_key_message
from foundry.errors import os_error_message
from stackbase.secrets import install_masked_excepthook, masked_traceback, redact_text

__all__ = ["USER_ERRORS", "EXIT_USER_ERROR", "run_cli", "user_message"]

USER_ERRORS: tuple[type[BaseException], ...] = (
    CompactHydraException,
    OmegaConfBaseException,
    ValueError,
    FileNotFoundError,
)
EXIT_USER_ERROR = 2
INTERRUPT_EXIT_CODE = 130
"""128 + SIGINT (as `foundry.train.preemption`, not imported here: it pulls in torch)."""
_REPORTED: tuple[type[BaseException], ...] = (*USER_ERRORS, OSError)
"""What `run_cli` looks at: the user errors, and `OSError`s (`os_error_message` says which are the user's)."""
_APPEND_ADVICE = re.compile(r"use \+\S+?=(\S+)")
_GROUP_OPTIONS = re.compile(r"Available options in '([^']+)'")
_SEARCH_PATH = re.compile(r"provider=\S+, path=file://(\S+)")


def _missing_option_message(err: MissingConfigException) -> str | None:
    """`model=mpt-tinny`: one line with the closest option, instead of Hydra's list
    (internal bases included)."""
    found = _GROUP_OPTIONS.search(str(err))
    path = err.missing_cfg_file or ""
    if not found or not err.options or not path.startswith(found.group(1) + "/"):
        return None
    group = found.group(1)
    choice = path[len(group) + 1 :]
    options = list(err.options)
    # data=finetune/x: Hydra lists conf/data/, the options are in finetune/
    folder = choice.rpartition("/")[0]
    # Hydra's search path is in the message; its config folders hold the subfolder's options
    if folder:
        roots = [Path(p) / group / folder for p in _SEARCH_PATH.findall(str(err))]
        inner = sorted({f"{folder}/{f.stem}" for root in roots for f in root.glob("*.yaml")})
        options = inner or options
    return group_option_message(group, choice, options)


def _resolver_error(err: BaseException) -> ValueError | None:
    """The `ValueError` a resolver raised, found along the exception's chain (OmegaConf re-raises it wrapped,
    `from None`), or None."""
    seen: set[int] = set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, ValueError) and not isinstance(link, OmegaConfBaseException):
            return link
        link = link.__cause__ or link.__context__
    return None


def user_message(err: BaseException) -> str:
    """The text printed after `error: `; Hydra's advice to add an undeclared key with `+` is replaced."""
    cause = err.__cause__
    if isinstance(err, MissingConfigException) and (message := _missing_option_message(err)):
        return message
    if isinstance(err, ConfigCompositionException) and isinstance(
        cause, ConfigAttributeError | ConfigKeyError
    ):
        schema = getattr(cause, "object_type", None)
        key = getattr(cause, "full_key", None)
        if key and isinstance(schema, type) and is_dataclass(schema):
            given = _APPEND_ADVICE.search(str(err))
            return f"{unknown_key_message(key, schema, given.group(1) if given else None)}\n{KEY_RULE}"
    if isinstance(err, InterpolationResolutionError) and (own := _resolver_error(err)) is not None:
        # a resolver's own user error (`run_name=..`): its message alone
        return str(own).strip()
    text = str(err).strip()
    if isinstance(err, CompactHydraException) and isinstance(cause, OmegaConfBaseException):
        text += "\n" + str(cause).strip()
    return text


def run_cli(main: Callable[[], Any]) -> int:
    """Calls the `@hydra.main` function `main` and returns the process's exit code.

    Returns:
        0 on success, `EXIT_USER_ERROR` (2) after printing a user error; bugs raise (traceback, exit 1).
    """
    # a bug's traceback (raised on from here) is printed with secrets masked
    install_masked_excepthook()
    user_full_error = os.environ.get("HYDRA_FULL_ERROR")
    # Hydra re-raises instead of printing its own report; we report
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        main()
    except _REPORTED as err:
        message = os_error_message(err) if isinstance(err, OSError) and err.errno is not None else None
        if message is None and not isinstance(err, USER_ERRORS):
            # an OSError that is not the user's (a broken connection): a bug's traceback, masked
            raise
        if user_full_error == "1":
            print(masked_traceback(err), end="", file=sys.stderr)
        print(f"error: {redact_text(message or user_message(err))}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        # Ctrl-C outside training steps (those stop with a checkpoint: preemption.py)
        print(
            "\n[foundry] interrupted (Ctrl-C); a rerun with the same run_name= resumes from the run's last "
            "complete checkpoint, if it has one",
            file=sys.stderr,
            flush=True,
        )
        return INTERRUPT_EXIT_CODE
    finally:
        if user_full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = user_full_error
    return 0
