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


@pytest.mark.parametrize("keep_zip", [False, True])
@pytest.mark.parametrize("cache_limit", [None, "1mb"])
def test_keep_zip_keeps_the_compressed_files(tmp_path, keep_zip, cache_limit):
    """Issue 28 item 3: `keep_zip=True` was accepted and ignored (compressed files always deleted)."""
    with MDSWriter(
        out=str(tmp_path / "remote"), columns={"id": "int"}, size_limit=200, compression="zstd"
    ) as w:
        for i in range(100):
            w.write({"id": i})
    local = tmp_path / "cache"
    ds = StreamingDataset(
        remote=str(tmp_path / "remote"),
        local=str(local),
        batch_size=2,
        keep_zip=keep_zip,
        cache_limit=cache_limit,
    )
    assert sorted(int(s["id"]) for s in ds) == list(range(100))
    raw = sorted(p.name for p in local.glob("shard.*.mds"))
    zipped = sorted(p.name for p in local.glob("shard.*.mds.zstd"))
    assert raw and (zipped == [n + ".zstd" for n in raw] if keep_zip else zipped == [])


def test_balanced_sampling_without_shuffle_draws_new_partial_repeats_each_epoch(tmp_path):
    """Issue 28 item 5: upstream reseeds balanced sampling every epoch, shuffled or not; we reused the same
    partial-repeat samples every epoch without shuffling."""
    from collections import Counter

    from streaming import Stream

    with MDSWriter(out=str(tmp_path / "ds"), columns={"id": "int"}, size_limit=200) as w:
        for i in range(100):
            w.write({"id": i})
    ds = StreamingDataset(
        streams=[Stream(local=str(tmp_path / "ds"), repeat=1.5)], batch_size=2, shuffle=False
    )
    epochs = [[int(s["id"]) for s in ds] for _ in range(2)]
    twice = [sorted(i for i, n in Counter(e).items() if n == 2) for e in epochs]
    assert len(twice[0]) == len(twice[1]) == 50 and twice[0] != twice[1]


def test_a_local_folder_filled_from_one_remote_refuses_another(tmp_path):
    """Issue 28 item 8: two datasets on one `local` with different remotes (upstream refuses live ones); here
    the second would have silently read the first dataset's index and shards (same file names)."""
    for name, start in (("a", 0), ("b", 1000)):
        with MDSWriter(out=str(tmp_path / name), columns={"id": "int"}, size_limit=200) as w:
            for i in range(start, start + 50):
                w.write({"id": i})
    local = str(tmp_path / "cache")
    assert [int(s["id"]) for s in StreamingDataset(remote=str(tmp_path / "a"), local=local, batch_size=1)][
        :1
    ] == [0]
    with pytest.raises(ValueError, match=r"holds a copy of .*/a, but this stream's remote is .*/b"):
        StreamingDataset(remote=str(tmp_path / "b"), local=local, batch_size=1)
    again = StreamingDataset(remote=str(tmp_path / "a") + "/", local=local, batch_size=1)  # the same remote
    assert len(again) == 50


def test_an_index_with_no_shards_is_refused(tmp_path):
    with MDSWriter(out=str(tmp_path / "empty"), columns={"id": "int"}):
        pass
    with pytest.raises(ValueError, match="index.json lists no shards"):
        StreamingDataset(local=str(tmp_path / "empty"), batch_size=1)


def test_upstreams_warnings_for_costly_settings(tmp_path):
    """Issue 28 item 8: predownload < batch_size, and a shuffle block smaller than a shard."""
    with MDSWriter(out=str(tmp_path / "ds"), columns={"id": "int"}, size_limit=400) as w:
        for i in range(100):
            w.write({"id": i})
    with pytest.warns(UserWarning, match="predownload=2 is smaller than batch_size=4"):
        StreamingDataset(local=str(tmp_path / "ds"), batch_size=4, predownload=2)
    with pytest.warns(UserWarning, match="shuffle_block_size=5 is smaller than the largest shard"):
        StreamingDataset(local=str(tmp_path / "ds"), batch_size=4, shuffle=True, shuffle_block_size=5)
