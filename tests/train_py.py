"""Runs `train.py` in a subprocess for end-to-end tests: a temp cwd, a private data cache, W&B offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_train_py(
    args: list[str],
    cwd: Path,
    *,
    ok: bool | None = True,
    timeout: int = 600,
    full_error: bool = True,
    env: dict[str, str] | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess:
    """`python train.py *args` in `cwd` (outputs land under it), with `FOUNDRY_CACHE=<cwd>/cache`.

    Args:
        ok: True: assert exit code 0; False: assert non-zero; None: no check.
        full_error: Set `HYDRA_FULL_ERROR=1` (tracebacks on); False removes it from the environment.
        env: Extra environment variables.
        text: Decode stdout/stderr (False: bytes, to search for byte strings).
    """
    full_env = {**os.environ, "FOUNDRY_CACHE": str(cwd / "cache"), "WANDB_MODE": "offline", **(env or {})}
    if "RUN_NAME" not in (env or {}):
        full_env.pop("RUN_NAME", None)
    if full_error:
        full_env["HYDRA_FULL_ERROR"] = "1"
    else:
        full_env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=text,
        timeout=timeout,
    )
    if ok is not None:
        assert (proc.returncode == 0) == ok, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc
