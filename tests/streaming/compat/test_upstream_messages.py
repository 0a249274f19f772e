"""Issue 41: error messages start with mosaicml-streaming 0.13.0's wording (its tests match on it), then ours."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming import MDSWriter, StreamingDataset
from streaming.plan.sampling import epoch_sampling_seed


def _write(out: Path, columns: dict[str, str] | None = None) -> None:
    with MDSWriter(out=str(out), columns=columns or {"x": "int"}, size_limit=1 << 8) as w:
        for i in range(20):
            w.write({name: i for name in (columns or {"x": "int"})})


def test_invalid_sampling_method() -> None:
    with pytest.raises(ValueError, match="^Invalid sampling method"):
        epoch_sampling_seed(seed=0, epoch=0, sampling_method="other", shuffle=False)


def test_writer_messages(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="^Invalid Writer argument"):
        MDSWriter(out=str(tmp_path / "a"), columns={"x": "int"}, bogus=1)
    with pytest.raises(ValueError, match="^`size_limit` must be less than"):
        MDSWriter(out=str(tmp_path / "b"), columns={"x": "int"}, size_limit=1 << 33)
    _write(tmp_path / "c")
    with pytest.raises(FileExistsError, match="^Directory is not empty"):
        MDSWriter(out=str(tmp_path / "c"), columns={"x": "int"})


def test_unsafe_type_and_cache_limit(tmp_path: Path) -> None:
    _write(tmp_path / "pkl", {"x": "pkl"})
    with pytest.raises(ValueError, match="contains an unsafe type"):
        StreamingDataset(local=str(tmp_path / "pkl"), batch_size=1)
    _write(tmp_path / "ok")
    with pytest.raises(ValueError, match="^Minimum cache usage.*is larger than the cache limit"):
        StreamingDataset(
            remote=str(tmp_path / "ok"), local=str(tmp_path / "cache"), cache_limit=10, batch_size=1
        )


def test_index_and_stream_messages(tmp_path: Path) -> None:
    import json

    (tmp_path / "nojson").mkdir()
    with pytest.raises(RuntimeError, match="^No `remote` provided, but local file"):
        StreamingDataset(local=str(tmp_path / "nojson"), batch_size=1)
    (tmp_path / "nojson" / "index.json").write_text("")
    with pytest.raises(json.JSONDecodeError, match="^Index file at.*is empty or corrupted"):
        StreamingDataset(local=str(tmp_path / "nojson"), batch_size=1)
    (tmp_path / "nojson" / "index.json").write_text('{"version": 2, "shards": []}')
    with pytest.raises(RuntimeError, match="^Stream contains no samples: "):
        StreamingDataset(local=str(tmp_path / "nojson"), batch_size=1)
    _write(tmp_path / "one")
    with pytest.raises(ValueError, match="^The number of samples assigned to a canonical node"):
        list(StreamingDataset(local=str(tmp_path / "one"), batch_size=1, num_canonical_nodes=64))


def test_invalid_sampling_method_of_a_dataset(tmp_path: Path) -> None:
    _write(tmp_path / "ds")
    with pytest.raises(ValueError, match="^Invalid sampling method"):
        StreamingDataset(local=str(tmp_path / "ds"), batch_size=1, sampling_method="ayo")


def test_cache_limit_between_index_and_four_shards(tmp_path: Path) -> None:
    with MDSWriter(out=str(tmp_path / "ok"), columns={"x": "bytes"}, size_limit=1 << 12) as w:
        for _ in range(8):
            w.write({"x": bytes(1000)})
    index = (tmp_path / "ok" / "index.json").stat().st_size
    with pytest.raises(ValueError, match="^Cache limit .* is too low. Increase the `cache_limit` to"):
        StreamingDataset(
            remote=str(tmp_path / "ok"), local=str(tmp_path / "cache"), cache_limit=index + 1, batch_size=1
        )


def test_settings_warnings_start_with_upstreams(tmp_path: Path) -> None:
    _write(tmp_path / "ds")
    with pytest.warns(UserWarning, match="^predownload < batch_size.*This may result in slower batch time"):
        StreamingDataset(local=str(tmp_path / "ds"), batch_size=4, predownload=2)
    with pytest.warns(UserWarning, match="^Shuffle block size was smaller than shard size"):
        StreamingDataset(
            local=str(tmp_path / "ds"), batch_size=1, shuffle=True, shuffle_algo="py1e", shuffle_block_size=2
        )


def test_py1e_span_warning_starts_with_upstreams(tmp_path: Path) -> None:
    _write(tmp_path / "ds")
    ds = StreamingDataset(
        local=str(tmp_path / "ds"), batch_size=1, shuffle=True, shuffle_algo="py1e", shuffle_block_size=2
    )
    with pytest.warns(UserWarning, match="^Shuffle block size was smaller than shard size"):
        list(ds)


def test_remote_folder_without_index_json(tmp_path: Path) -> None:
    (tmp_path / "remote").mkdir()
    with pytest.raises(FileNotFoundError, match="No such file or directory"):
        StreamingDataset(remote=str(tmp_path / "remote"), local=str(tmp_path / "cache"), batch_size=1)


def test_index_json_counts_toward_cache_limit(tmp_path: Path) -> None:
    """Shards plus index.json over the limit (shards alone under it): some shards are evicted, as upstream."""
    with MDSWriter(out=str(tmp_path / "remote"), columns={"x": "bytes"}, size_limit=500) as w:
        for _ in range(2000):
            w.write({"x": b"\0"})
    remote = tmp_path / "remote"
    shards = sum(p.stat().st_size for p in remote.iterdir() if p.name != "index.json")
    index = (remote / "index.json").stat().st_size
    limit = shards + index // 2
    ds = StreamingDataset(remote=str(remote), local=str(tmp_path / "cache"), cache_limit=limit, batch_size=1)
    for _ in range(2):
        list(ds)
    kept = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len(kept) < len(list(remote.iterdir()))
    assert sum((tmp_path / "cache" / name).stat().st_size for name in kept) <= limit
