"""`mkdocs build --strict` passes on the committed pages (~3 s), and strict mode does fail on a broken link or
anchor (a copy of the docs with one of each injected)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.docs.conftest import REPO, mkdocs_build


def test_the_site_builds_strictly(built_site: Path):
    for page in ("index.html", "getting-started.html", "reference/config.html", "reference/cli.html"):
        assert (built_site / page).is_file(), page
    assert (built_site / "search" / "search_index.json").is_file()


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path):
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "docs", copy / "docs")
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copy(REPO / "SECURITY.md", copy / "SECURITY.md")
    page = copy / "docs" / "getting-started.md"
    for broken in ("[gone](guides/no-such-page.md)", "[gone](guides/training.md#no-such-anchor)"):
        page.write_text(page.read_text() + f"\n{broken}\n")
        proc = mkdocs_build(tmp_path / "site", config=copy / "mkdocs.yml")
        assert proc.returncode != 0 and "no-such" in proc.stderr, proc.stderr[-2000:]
        page.write_text(page.read_text().replace(f"\n{broken}\n", ""))
