"""Shared set-ups of the cache tests."""

from __future__ import annotations

import os

import pytest

from streaming.cache import space


@pytest.fixture
def two_of_three_cached(tmp_path) -> tuple[space.SpaceKeeper, list[str]]:
    """A 2000-byte cache in ``tmp_path`` holding shards 0 and 1 (1000 bytes each); shard 2 is not on disk."""
    folder = str(tmp_path)
    paths = [os.path.join(folder, f"shard.{k:05d}.mds") for k in range(3)]
    for path in paths[:2]:
        with open(path, "wb") as f:
            f.write(b"x" * 1000)
    entries = {
        k: space.SpaceEntry(local=folder, lock_name=os.path.basename(p), paths=(p,))
        for k, p in enumerate(paths)
    }
    return space.SpaceKeeper(folder, entries, 2000, 1.0), paths
