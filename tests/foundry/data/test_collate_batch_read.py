"""TextCollator on the workers' batch read path (`streaming.reader.batch_read`): fixed-size token rows
gathered per batch give the same batches, bit for bit, as the in-process per-sample path, with stream ids,
with 1 and 2 workers and after a mid-epoch resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foundry.data.collate import STREAM_KEY, TextCollator
from foundry.data.documents import DocumentRule
from foundry.data.loader import TextLoader
from streaming import MDSWriter, Stream, StreamingDataset
from streaming.reader.batch_read import ColumnBatch, read_batch


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    paths = []
    for k, columns in enumerate(
        (
            {"tokens": "ndarray:int32:8", "id": "int"},
            {"tokens": "ndarray:int32:8", "document_lengths": "ndarray:int32"},
        )
    ):
        path = str(tmp_path_factory.mktemp(f"s{k}"))
        rng = np.random.default_rng(k)
        with MDSWriter(out=path, columns=columns, size_limit=150) as w:
            for i in range(40):
                sample = {"tokens": rng.integers(0, 50_000, size=8, dtype=np.int32)}
                sample["id" if k == 0 else "document_lengths"] = (
                    i if k == 0 else np.array([3, 5], dtype=np.int32)
                )
                w.write(sample)
        paths.append(path)
    return paths


def _loader(paths: list[str], documents: DocumentRule | None = None, **kw: object) -> TextLoader:
    ds = StreamingDataset(
        streams=[Stream(local=p) for p in paths],
        batch_size=4,
        shuffle=True,
        shuffle_algo="py1e",
        shuffle_seed=11,
        num_canonical_nodes=2,
        stream_tag=STREAM_KEY,
    )
    collate = TextCollator(max_seq_len=6, pad_token_id=0, vocab_size=50_048, documents=documents)
    return TextLoader(ds, batch_size=4, collate_fn=collate, drop_last=True, **kw)


def _equal(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert list(x) == list(y)
        assert all(torch.equal(x[k], y[k]) and x[k].dtype == y[k].dtype for k in x)


@pytest.mark.parametrize("documents", [None, DocumentRule(eos_id=7)])
def test_workers_on_the_batch_read_path_give_the_in_process_batches(streams, documents) -> None:
    in_process = list(_loader(streams, documents))
    assert "stream_id" in in_process[0] and (documents is None) == ("sequence_id" not in in_process[0])
    for workers in (1, 2):
        _equal(list(_loader(streams, documents, num_workers=workers)), in_process)


def test_resume_on_the_batch_read_path(streams) -> None:
    whole = list(_loader(streams))
    first = _loader(streams, num_workers=2)
    it = iter(first)
    head = [next(it) for _ in range(5)]
    state = first.state_dict()
    del it
    resumed = _loader(streams, num_workers=2)
    resumed.load_state_dict(state)
    _equal(head + list(resumed), whole)


def test_pack_of_a_column_batch_equals_pack_of_sample_dicts(streams) -> None:
    def dataset() -> StreamingDataset:  # a fresh one each: an iteration advances the epoch
        return StreamingDataset(streams=[Stream(local=streams[0])], batch_size=4, stream_tag=STREAM_KEY)

    collate = TextCollator(max_seq_len=6, pad_token_id=0, stream_map=[5])
    batch = read_batch(list(dataset()._iter_refs())[:12], collate.columns, tag=STREAM_KEY)
    assert isinstance(batch, ColumnBatch) and isinstance(batch.columns["tokens"], np.ndarray)  # gathered
    assert "id" not in batch.columns  # not read
    _equal([collate(batch)], [collate(list(dataset())[:12])])
