"""``group_by_folder`` (the cache scan's folder -> names table) against the ``os.path.split`` definition."""

from __future__ import annotations

import os
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.cache.space import group_by_folder


def _by_split(paths: list[str]) -> dict[str, frozenset[str]]:
    by_dir: dict[str, set[str]] = defaultdict(set)
    for path in paths:
        folder, name = os.path.split(path)
        by_dir[folder].add(name)
    return {folder: frozenset(names) for folder, names in by_dir.items()}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab/.", max_size=8), max_size=12))
def test_group_by_folder_equals_os_path_split(paths):
    """Every path, odd ones included ("/a", "a", "a//b", "a/", "//"), lands where ``os.path.split`` puts it."""
    assert group_by_folder(paths) == _by_split(paths)


def test_group_by_folder_cache_paths():
    paths = [f"/cache/ds/shard.{i:05d}.mds" for i in range(5)] + ["/cache/ds/sub/shard.00000.mds.zstd"]
    assert group_by_folder(paths) == _by_split(paths)
    assert set(group_by_folder(paths)) == {"/cache/ds", "/cache/ds/sub"}
