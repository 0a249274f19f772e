"""Entry scripts run in the project's `.venv` from a shell that never activated it (issue 40).

`make install` builds `.venv`; a fresh shell's `python train.py` is the system's (or pyenv's) Python, which
has none of the dependencies (`No module named 'hydra'`). `use_project_venv(__file__)`, called by `train.py`
and the scripts before any third-party import, re-executes the same command with `<repo>/.venv/bin/python`
when the running interpreter lacks the project's packages and that environment exists. An interpreter that has
them (an activated `.venv`, a conda env the user installed into) is left alone. Standard library only: it runs
under any Python before anything is installed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["NEEDED", "use_project_venv"]

NEEDED = ("hydra", "omegaconf", "torch")
"""Packages whose absence means "not the project's environment"."""


def _repo_of(script: Path) -> Path | None:
    for folder in script.resolve().parents:
        if (folder / "pyproject.toml").is_file() and (folder / "train.py").is_file():
            return folder
    return None


def use_project_venv(script: str, *, argv: list[str] | None = None) -> None:
    """Re-executes `script` (with the same arguments) in `<repo>/.venv` when this interpreter lacks `NEEDED`.

    Returns only when nothing needs doing; exits 2 with one line when the packages are missing and there is no
    `.venv` to run in (`make install` first)."""
    if all(importlib.util.find_spec(name) is not None for name in NEEDED):
        return
    repo = _repo_of(Path(script))
    python = repo / ".venv" / "bin" / "python" if repo is not None else None
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if python is None or not python.exists() or Path(sys.executable).resolve() == python.resolve():
        print(
            f"error: this Python ({sys.executable}) lacks {', '.join(missing)}: run `make install` in the "
            "checkout first (it builds .venv), then run this command again",
            file=sys.stderr,
        )
        raise SystemExit(2)
    args = sys.argv[1:] if argv is None else argv
    os.execv(str(python), [str(python), str(Path(script).resolve()), *args])
