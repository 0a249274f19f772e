"""The one way we `torch.load` a file someone else may have written: weights-only unless the user opts in.

A pickle can run arbitrary code when loaded, so `torch.load(weights_only=True)` is the default everywhere
(checkpoints, exported weights); a file that needs full unpickling is refused with a message naming it and the
opt-in that applies where it was loaded (`checkpoint.allow_pickle=true` for checkpoints).
"""

from __future__ import annotations

import re
from typing import Any

import torch

__all__ = ["load_file"]


def load_file(
    path: str,
    *,
    allow_pickle: bool,
    opt_in: str | None = "set checkpoint.allow_pickle=true",
    mmap: bool = False,
) -> Any:
    """`torch.load` to CPU (memory-mapped with `mmap`), refusing pickled objects unless `allow_pickle`.

    Raises:
        ValueError: If the file holds pickled objects and `allow_pickle` is False (names `path`, the global
            the file asked for when torch says, and `opt_in`; None: the tool has no opt-in). Never torch's own
            advice to load with `weights_only=False`.
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=not allow_pickle, mmap=mmap)
    except Exception as e:
        # the unpickler's error type varies between torch versions
        if allow_pickle or "weights_only" not in str(e):
            raise
        found = re.search(r"GLOBAL (\S+)", str(e)) or re.search(r"Unsupported global: (\S+)", str(e))
        what = f" (it names {found.group(1).rstrip('.:')})" if found else ""
        hint = f" If you trust this file, {opt_in}" if opt_in else ""
        raise ValueError(
            f"{path}: holds pickled Python objects{what}, which can run arbitrary code when loaded; it was "
            f"refused.{hint}"
        ) from None
