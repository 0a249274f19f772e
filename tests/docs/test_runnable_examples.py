"""Every code block the docs mark as runnable (an HTML comment `<!-- runnable -->` on the line before a
```bash fence) runs from the repository root and exits 0. Each line is one command; the environment is an
activated `.venv` (its `bin/` first on PATH), as the pages say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- runnable -->"
BLOCK = re.compile(r"^<!-- runnable -->\n(?:\n)?```bash\n(.*?)^```", re.M | re.S)


def runnable_blocks() -> list[tuple[str, str]]:
    """(page, block text) for each marked block of README.md and docs/."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    found = []
    for page in pages:
        text = page.read_text()
        blocks = BLOCK.findall(text)
        markers = len(re.findall(rf"^{re.escape(MARKER)}$", text, re.M))
        assert len(blocks) == markers, f"{page}: a {MARKER} line not followed by a ```bash block"
        found += [(str(page.relative_to(REPO)), block) for block in blocks]
    return found


def test_some_blocks_are_marked():
    assert len(runnable_blocks()) >= 2


@pytest.mark.parametrize("page, block", runnable_blocks(), ids=lambda v: v if v.endswith(".md") else "")
def test_a_runnable_block_exits_0(page, block):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command in [line for line in block.splitlines() if line.strip() and not line.startswith("#")]:
        if command.startswith("source .venv/") and not (REPO / ".venv").is_dir():
            continue  # an environment made elsewhere (VENV=...): PATH above activates it already
        proc = subprocess.run(
            ["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, f"{page}: `{command}` exited {proc.returncode}\n{proc.stderr[-2000:]}"
