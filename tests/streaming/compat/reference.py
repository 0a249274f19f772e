"""Running a script under mosaicml-streaming 0.13.0 (the reference venv of `../shared/bench/setup_reference.sh`).

The reference venv lives outside the repository (`/tmp/ref/venv-streaming`, or `$STREAMING_REFERENCE_PYTHON`);
tests that compare against it skip when it is missing. A script prints one JSON line, which `run_reference`
returns.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

REFERENCE_PYTHON = Path(os.environ.get("STREAMING_REFERENCE_PYTHON", "/tmp/ref/venv-streaming/bin/python"))


def reference_available() -> bool:
    """Whether the reference venv is built (its setup script writes `.setup-complete` last)."""
    return REFERENCE_PYTHON.exists() and (REFERENCE_PYTHON.parents[1] / ".setup-complete").exists()


def run_reference(code: str, *, cwd: Path, timeout: float = 300) -> object:
    """Run `code` (dedented) with mosaicml-streaming 0.13.0 in a clean environment; its last stdout line as JSON.

    Skips the calling test when the reference venv is missing.
    """
    if not reference_available():
        pytest.skip(f"the mosaicml-streaming reference venv is not built ({REFERENCE_PYTHON}): run "
                    "bash ../shared/bench/setup_reference.sh")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [str(REFERENCE_PYTHON), "-c", textwrap.dedent(code)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
