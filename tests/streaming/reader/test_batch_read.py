"""The batch read path (`streaming.reader.batch_read`, `ShardReader.read_columns`) equals the per-sample path,
bit for bit, for random index sets over several shards: raw, zstd-compressed and hashed shards; fixed-size
ndarray columns gathered; variable-length `bytes`/`str`/ndarray columns (and columns after them) read per
sample."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming import CSVWriter, JSONWriter, MDSWriter, Stream, StreamingDataset
from streaming.format.index import load_index
from streaming.format.reader import open_shard
from streaming.loader.batch_groups import GroupedBatches
from streaming.reader.batch_read import ColumnBatch, SampleRef, read_batch

FIXED = {"id": "int", "tokens": "ndarray:int32:6", "score": "float32"}
MIXED = {  # `a_ids` is gathered (before every variable-size column), `tokens` and `z` are not (after them)
    "a_ids": "ndarray:uint16:5",
    "blob": "bytes",
    "lengths": "ndarray:int32",
    "text": "str",
    "tokens": "ndarray:int32:6",
    "z": "int",
}
LAYOUTS = {
    "fixed": (FIXED, None, None),
    "fixed_zstd_hashed": (FIXED, "zstd", ["sha1", "xxh64"]),
    "mixed": (MIXED, None, None),
    "mixed_zstd": (MIXED, "zstd", None),
}


def _sample(columns: dict[str, str], i: int) -> dict:
    rng = np.random.default_rng(i)
    values = {
        "id": i,
        "tokens": rng.integers(0, 60_000, size=6, dtype=np.int32),
        "score": np.float32(i / 7),
        "a_ids": rng.integers(0, 60_000, size=5, dtype=np.uint16),
        "text": "x" * (i % 5) + str(i),
        "blob": bytes(range(i % 9)),
        "lengths": np.arange(1 + i % 4, dtype=np.int32),
        "z": -i,
    }
    return {k: values[k] for k in columns}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = {}
    for name, (columns, compression, hashes) in LAYOUTS.items():
        path = str(tmp_path_factory.mktemp(name))
        with MDSWriter(
            out=path, columns=columns, compression=compression, hashes=hashes, size_limit=200
        ) as w:
            for i in range(60):
                w.write(_sample(columns, i))
        if compression:  # only the compressed files: shards are decompressed when prepared
            for f in os.listdir(path):
                if f.endswith(".mds"):
                    os.remove(os.path.join(path, f))
        out[name] = path
    return out


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray | np.generic)
            and isinstance(b, np.ndarray | np.generic)
            and a.dtype == b.dtype
            and np.shape(a) == np.shape(b)
            and np.array_equal(a, b)
        )
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_batch_read_equals_per_sample(datasets: dict[str, str], layout: str, data: st.DataObject) -> None:
    hashed = LAYOUTS[layout][2] is not None
    ds = StreamingDataset(local=datasets[layout], batch_size=4, validate_hash="xxh64" if hashed else None)
    assert ds.num_shards > 3
    ids = data.draw(st.lists(st.integers(0, ds.size - 1), min_size=1, max_size=24))
    columns = data.draw(st.lists(st.sampled_from([*LAYOUTS[layout][0], "absent"]), min_size=1, unique=True))
    access = ds._shards_access()
    batch = read_batch([access.sample_ref(i) for i in ids], columns, tag=None)
    expected = [ds[i] for i in ids]
    wanted = [c for c in columns if c in expected[0]] or list(expected[0])
    assert list(batch.columns) == wanted and len(batch) == len(ids)
    for got, want in zip(batch, expected, strict=True):
        assert list(got) == wanted and all(_same(got[c], want[c]) for c in wanted)
    gathered = "tokens" if layout.startswith("fixed") else "a_ids"
    if gathered in columns:  # one (B, ...) array
        rows = batch.columns[gathered]
        assert isinstance(rows, np.ndarray) and rows.shape == (len(ids), 6 if gathered == "tokens" else 5)
        assert np.array_equal(rows, np.stack([e[gathered] for e in expected]))


def test_fixed_columns_are_gathered_and_variable_ones_decoded(tmp_path) -> None:
    with MDSWriter(out=str(tmp_path), columns=MIXED) as w:
        for i in range(4):
            w.write(_sample(MIXED, i))
    shard = open_shard(str(tmp_path), load_index(str(tmp_path)).shards[0])
    picks = np.array([2, 0, 1, 1], dtype=np.int64)
    assert sorted(shard.column_sources) == ["a_ids"]
    cols = shard.read_columns(picks, ["tokens", "a_ids", "blob", "z"])
    assert list(cols) == ["tokens", "a_ids", "blob", "z"]  # in the order asked for
    assert isinstance(cols["a_ids"], np.ndarray) and cols["a_ids"].dtype == np.uint16  # before any var column
    assert all(isinstance(cols[c], list) for c in ("tokens", "blob", "z"))  # var-length, and after one
    for k, i in enumerate(picks.tolist()):
        sample = shard[i]
        assert all(_same(cols[c][k], sample[c]) for c in ("tokens", "a_ids", "blob", "z"))
    assert shard.read_columns(picks, ["absent"]) == {}
    with pytest.raises(IndexError, match="out of range"):
        shard.read_columns(np.array([len(shard)]), ["tokens"])


def test_a_sample_that_does_not_fit_the_schema_raises_the_per_sample_path_error(tmp_path) -> None:
    with MDSWriter(out=str(tmp_path), columns=FIXED) as w:
        for i in range(3):
            w.write(_sample(FIXED, i))
    index = load_index(str(tmp_path))
    path = tmp_path / index.shards[0].raw_data.basename
    raw = bytearray(path.read_bytes())
    # shorten sample 1 by moving offsets[2] one byte back (the shard keeps its size: sample 2 grows)
    off = 4 + 4 * 2
    raw[off : off + 4] = (int.from_bytes(raw[off : off + 4], "little") - 1).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    shard = open_shard(str(tmp_path), index.shards[0])
    assert np.array_equal(shard.read_columns(np.array([0]), ["tokens"])["tokens"][0], shard[0]["tokens"])
    with pytest.raises(ValueError) as per_sample:
        shard[1]
    with pytest.raises(type(per_sample.value), match=re.escape(str(per_sample.value))):
        shard.read_columns(np.array([0, 1]), ["tokens"])


def test_tagged_refs_and_missing_columns(tmp_path) -> None:
    paths = []
    for k, columns in enumerate(({"tokens": "ndarray:int32:6", "doc": "int"}, {"tokens": "ndarray:int32:6"})):
        paths.append(str(tmp_path / f"s{k}"))
        with MDSWriter(out=paths[-1], columns=columns, size_limit=100) as w:
            for i in range(12):
                w.write({"tokens": np.full(6, 100 * k + i, dtype=np.int32), "doc": i}) if k == 0 else w.write(
                    {"tokens": np.full(6, 100 * k + i, dtype=np.int32)}
                )

    def dataset() -> StreamingDataset:  # a fresh one each: an iteration advances the epoch
        streams = [Stream(local=p) for p in paths]
        return StreamingDataset(streams=streams, batch_size=4, shuffle=True, shuffle_seed=1, stream_tag="_s")

    plain = list(dataset())
    refs = list(dataset()._iter_refs())
    assert len(refs) == len(plain) and all(isinstance(r, SampleRef) for r in refs)
    batch = read_batch(refs, ["tokens", "doc"], tag="_s")
    assert isinstance(batch.columns["tokens"], np.ndarray) and batch.streams is not None
    for got, want in zip(batch, plain, strict=True):  # a stream without `doc` has no `doc` key, as per sample
        assert sorted(got) == sorted(want) and all(_same(got[c], want[c]) for c in want)


class _Recorder:
    def __init__(self) -> None:
        self.kinds: list[type] = []

    def __call__(self, samples):
        self.kinds.append(type(samples))
        return [dict(s) for s in samples]


def test_grouped_batches_read_columns_when_the_collator_names_them(datasets: dict[str, str]) -> None:
    ds = StreamingDataset(local=datasets["fixed"], batch_size=4, shuffle=True, shuffle_seed=5)
    plain, columnar = _Recorder(), _Recorder()
    a = [
        b
        for g in GroupedBatches(ds, batch_size=4, collate=plain, drop_last=False, group=2)
        for b in g.batches
    ]
    ds2 = StreamingDataset(local=datasets["fixed"], batch_size=4, shuffle=True, shuffle_seed=5)
    grouped = GroupedBatches(
        ds2, batch_size=4, collate=columnar, drop_last=False, group=2, columns=["tokens"]
    )
    b = [b for g in grouped for b in g.batches]
    assert set(plain.kinds) == {list} and set(columnar.kinds) == {ColumnBatch}
    assert len(a) == len(b) == 15
    for x, y in zip(a, b, strict=True):
        assert [list(s) for s in y] == [["tokens"]] * len(x)
        assert all(_same(s["tokens"], t["tokens"]) for s, t in zip(x, y, strict=True))


def test_json_and_csv_shards_are_read_per_sample(tmp_path) -> None:
    for writer, name in ((JSONWriter, "json"), (CSVWriter, "csv")):
        path = str(tmp_path / name)
        with writer(out=path, columns={"n": "int", "s": "str"}, size_limit=60) as w:
            for i in range(10):
                w.write({"n": i, "s": f"v{i}"})

        def dataset(path: str = path) -> StreamingDataset:
            return StreamingDataset(local=path, batch_size=4, shuffle=True, shuffle_seed=2)

        plain = list(dataset())
        batch = read_batch(list(dataset()._iter_refs()), ["s", "absent"], tag=None)
        assert [dict(s) for s in batch] == [{"s": p["s"]} for p in plain]
