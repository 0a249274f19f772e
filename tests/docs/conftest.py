"""The documentation site built once per session into a temporary folder (`mkdocs build --strict`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")


def mkdocs_build(site: Path, *, config: Path = REPO / "mkdocs.yml") -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of `config` into `site` (the committed pages as they are; nothing regenerated)."""
    if not MKDOCS.exists():
        pytest.skip("mkdocs is not installed (make install: the dev set has it)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=config.parent, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    proc = mkdocs_build(site)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return site
