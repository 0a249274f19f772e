"""Runs a script on several ranks for the dist tests: `python -m torch.distributed.run --standalone` in a
subprocess (plain `python` for one process), in an environment without an outer launch's variables and with
one OpenMP thread a rank (gloo ranks on a shared CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

LAUNCH_ENV = (
    "RUN_NAME",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
"""What an outer `torchrun` (or a named run) sets; it must not leak into the child."""


def torchrun(nproc: int) -> list[str]:
    """`python -m torch.distributed.run --standalone --nproc_per_node=N`: the command before the script."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]


def launcher(nproc: int) -> list[str]:
    """`torchrun(nproc)` for `nproc` > 1, plain `python` for one process."""
    return torchrun(nproc) if nproc > 1 else [sys.executable]


def launch_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment less `LAUNCH_ENV`, with `OMP_NUM_THREADS=1` and then `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra or {})
    return env


def run_ranks(
    script: Path,
    *args: str | Path,
    nproc: int,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: int = 300,
) -> subprocess.CompletedProcess:
    """`script *args` on `nproc` ranks (see `launcher`, `launch_env`; `env` adds variables); asserts exit code
    0 and shows the ends of stdout and stderr when it is not."""
    proc = subprocess.run(
        [*launcher(nproc), str(script), *map(str, args)],
        cwd=cwd,
        env=launch_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc
