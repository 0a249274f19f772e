"""Issue 28 item 12: a shard deleted by hand from `local` mid-epoch is fetched again (in process and with
loader workers, with and without a cache limit)."""

from __future__ import annotations

import glob
import os

import pytest

from streaming import MDSWriter, StreamingDataLoader, StreamingDataset


@pytest.mark.parametrize("cache_limit", [None, "1mb"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_shard_deleted_by_hand_mid_epoch_is_fetched_again(tmp_path, cache_limit, workers):
    with MDSWriter(out=str(tmp_path / "remote"), columns={"id": "int"}, size_limit=200) as w:
        for i in range(300):
            w.write({"id": i})
    local = tmp_path / "cache"
    ds = StreamingDataset(
        remote=str(tmp_path / "remote"), local=str(local), batch_size=2, cache_limit=cache_limit
    )
    ids: list[int] = []
    for k, batch in enumerate(StreamingDataLoader(ds, batch_size=2, num_workers=workers)):
        ids += [int(i) for i in batch["id"]]
        if k == 20:
            for path in glob.glob(str(local / "shard.*.mds")):
                os.remove(path)
    assert sorted(ids) == list(range(300))
