"""`ShardSequence`, the indexing shared by one stream's `ShardTable` and all streams' `AllShards`: any index,
negative index or slice gives the same shards as the flat list of the indexes, eager or from the node cache,
and an index out of range is an `IndexError` naming the shard and the count."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming import MDSWriter
from streaming.format.index import ShardInfo, load_index
from streaming.reader.dataset_index import AllShards
from streaming.reader.index_cache import ShardTable, load_shard_table

SIZES = (1, 7, 3)  # samples per stream; size_limit=120 puts each in its own shard


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[ShardTable, ShardTable, list[ShardInfo]]]:
    """Per stream: an eager table, a cached (lazy) table and the shards `load_index` parses."""
    root = tmp_path_factory.mktemp("streams")
    out = []
    for k, n in enumerate(SIZES):
        folder = str(root / f"s{k}")
        with MDSWriter(out=folder, columns={"x": "int", "s": "str"}, size_limit=120) as w:
            for i in range(n):
                w.write({"x": i, "s": "y" * 40})
        shards = load_index(folder).shards
        cached = load_shard_table(folder, cache_dir=str(root / "cache"), min_bytes=0)
        assert cached.is_cached
        out.append((ShardTable.from_index(load_index(folder)), cached, shards))
    return out


def _combined(streams: list, picks: list[int], lazy: bool) -> tuple[AllShards, list[ShardInfo]]:
    tables = [streams[p][1 if lazy else 0] for p in picks]
    return AllShards(tables), [sh for p in picks for sh in streams[p][2]]


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.integers(0, len(SIZES) - 1), max_size=4),
    lazy=st.booleans(),
    index=st.integers(-20, 20),
    start=st.none() | st.integers(-20, 20),
    stop=st.none() | st.integers(-20, 20),
    step=st.none() | st.integers(-3, 3).filter(lambda s: s != 0),
)
def test_all_shards_index_like_the_flat_list(streams, picks, lazy, index, start, stop, step):
    shards, flat = _combined(streams, picks, lazy)
    assert len(shards) == len(flat)
    assert shards[start:stop:step] == flat[start:stop:step]
    assert list(shards) == flat
    if -len(flat) <= index < len(flat):
        assert shards[index] == flat[index]
    else:
        with pytest.raises(IndexError, match=f"shard {index} out of range for {len(flat)} shards"):
            shards[index]


@pytest.mark.parametrize("lazy", [False, True])
def test_one_table_indexes_like_its_parsed_shards(streams, lazy):
    for eager, cached, flat in streams:
        table = cached if lazy else eager
        n = len(flat)
        assert [table[i] for i in range(-n, n)] == flat + flat
        assert table[::-1] == flat[::-1] and table[1:] == flat[1:]
        with pytest.raises(IndexError, match=f"shard {n} out of range for {n} shards"):
            table[n]
        with pytest.raises(IndexError, match=f"shard {-n - 1} out of range"):
            table[-n - 1]
