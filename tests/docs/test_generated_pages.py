"""The committed generated pages are what the generators write now: the configuration and command-line
references and the benchmark plots (each generator runs in its own process into a temporary folder)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GENERATORS = {
    "gen_config_reference.py": ("docs/reference/config.md", False),
    "gen_cli_reference.py": ("docs/reference/cli.md", False),
    "gen_bench_plots.py": ("docs/assets/bench", True),
}


@pytest.mark.parametrize("script", sorted(GENERATORS))
def test_the_committed_page_is_up_to_date(script, tmp_path):
    committed, is_folder = GENERATORS[script]
    out = tmp_path / ("out" if is_folder else Path(committed).name)
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "docs" / script), "--out", str(out)],
        cwd=REPO, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    pairs = (
        [(p, REPO / committed / p.name) for p in sorted(out.iterdir())]
        if is_folder
        else [(out, REPO / committed)]
    )
    assert pairs
    for fresh, old in pairs:
        assert old.exists() and fresh.read_text() == old.read_text(), (
            f"{old.relative_to(REPO)} is stale: run `make docs` and commit it"
        )
    if is_folder:
        assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (REPO / committed).iterdir())
