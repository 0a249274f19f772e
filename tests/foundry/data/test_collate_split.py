"""TextCollator's two halves: `pack` (workers: narrow ids) + `PackedRows.to_tensors` (rank) == the per-row
reference; the loader runs `pack` in its workers and pins when asked."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from foundry.data import collate
from foundry.data.collate import IGNORE_INDEX, PackedRows, TextCollator
from foundry.data.documents import DocumentRule, sequence_ids_from_tokens
from foundry.data.loader import TextLoader
from streaming import MDSWriter, StreamingDataset
from streaming.loader.shared_batches import SharedBatchCollate

DTYPES = ["uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


def reference(rows: list[np.ndarray], *, max_seq_len: int, pad: int) -> dict[str, list]:
    """One row at a time: truncate, widen to int64, right-pad; labels -100 on padding."""
    rows = [np.asarray(r)[:max_seq_len].astype(np.int64) for r in rows]
    seq = max(len(r) for r in rows)
    ids = [r.tolist() + [pad] * (seq - len(r)) for r in rows]
    out: dict[str, list] = {"input_ids": ids}
    if any(len(r) != seq for r in rows):
        out["labels"] = [r.tolist() + [IGNORE_INDEX] * (seq - len(r)) for r in rows]
        out["attention_mask"] = [[1] * len(r) + [0] * (seq - len(r)) for r in rows]
    else:
        out["labels"] = ids
    return out


@st.composite
def batches(draw):
    dtypes = draw(st.lists(st.sampled_from(DTYPES), min_size=1, max_size=2))
    same_length = draw(st.none() | st.integers(0, 9))  # an int: every row that long (the one-copy path)
    rows = []
    for _ in range(draw(st.integers(1, 5))):
        dtype = np.dtype(draw(st.sampled_from(dtypes)))
        hi = min(np.iinfo(dtype).max, 2**40)
        size = {} if same_length is None else {"min_size": same_length}
        values = draw(
            st.lists(
                st.integers(max(np.iinfo(dtype).min, -5), hi),
                max_size=9 if same_length is None else same_length,
                **size,
            )
        )
        rows.append(np.array(values, dtype=dtype))
    if all(len(r) == 0 for r in rows):
        rows[0] = np.array([1], dtype=rows[0].dtype)
    return rows, draw(st.integers(1, 10)), draw(st.sampled_from([0, 1, 255, 256, 50_256, 70_000, -1]))


@settings(max_examples=150, deadline=None)
@given(batches())
def test_pack_then_to_tensors_equals_the_per_row_reference(case):
    rows, max_seq_len, pad = case
    c = TextCollator(max_seq_len=max_seq_len, pad_token_id=pad)
    packed = c.pack([{"tokens": r} for r in rows])
    packed = pickle.loads(pickle.dumps(packed))  # as through the worker pipe
    out = packed.to_tensors()
    ref = reference(rows, max_seq_len=max_seq_len, pad=pad)
    assert list(out) == list(ref)
    for key, value in ref.items():
        assert out[key].dtype == torch.int64 and out[key].tolist() == value, key
    # one tensor for both when no row was padded (the model shifts labels into a new tensor)
    assert (out["labels"].data_ptr() == out["input_ids"].data_ptr()) == ("attention_mask" not in out)
    assert out["input_ids"].is_contiguous() and out["labels"].is_contiguous()


def test_pack_sends_the_narrowest_dtype_holding_ids_and_pad():
    c = TextCollator(max_seq_len=4, pad_token_id=0)
    full = c.pack([{"tokens": np.arange(4, dtype=np.uint16)}, {"tokens": np.arange(5, dtype=np.uint16)}])
    assert full.ids.dtype == np.uint16 and full.lengths is None
    int32 = c.pack([{"tokens": np.arange(6, dtype=np.int32)}, {"tokens": np.arange(6, dtype=np.int32)}])
    assert (
        int32.ids.dtype == np.int32 and int32.ids.flags.c_contiguous and int32.ids.tolist()[1] == [0, 1, 2, 3]
    )
    wide_pad = TextCollator(max_seq_len=4, pad_token_id=50_256).pack(
        [{"tokens": np.arange(4, dtype=np.uint8)}, {"tokens": np.arange(2, dtype=np.uint8)}]
    )
    assert wide_pad.ids.dtype == np.uint16 and wide_pad.ids[1].tolist() == [0, 1, 50_256, 50_256]
    assert wide_pad.lengths.tolist() == [4, 2]


def test_document_ids_travel_narrow_and_arrive_int64():
    c = TextCollator(max_seq_len=6, pad_token_id=0, documents=DocumentRule(eos_id=0))
    rows = [np.array([5, 0, 7, 0, 8], dtype=np.uint16), np.array([3, 4, 0, 5, 6, 7], dtype=np.uint16)]
    packed = c.pack([{"tokens": r} for r in rows])
    assert packed.sequence_id.dtype == np.int16
    expected = sequence_ids_from_tokens(
        np.array([[5, 0, 7, 0, 8, 0], [3, 4, 0, 5, 6, 7]]),
        rule=DocumentRule(eos_id=0),
        lengths=np.array([5, 6]),
    )
    out = packed.to_tensors()
    assert out["sequence_id"].dtype == torch.int64 and out["sequence_id"].tolist() == expected.tolist()


def test_vocab_check_names_the_first_bad_rows_largest_id_and_ignores_padding():
    c = TextCollator(max_seq_len=4, pad_token_id=900, vocab_size=512)
    ok = c([{"tokens": np.array([1, 2], dtype=np.int32)}, {"tokens": np.array([3, 4, 5], dtype=np.int32)}])
    assert ok["input_ids"][0].tolist() == [1, 2, 900]  # the pad id may lie outside the vocabulary
    rows = [np.array([1, 600, 2]), np.array([700, 1, 1]), np.array([9999, 1])]
    with pytest.raises(ValueError, match=r"token id 600 but model.vocab_size=512.*e\.g\. 640"):
        c([{"tokens": r} for r in rows])
    with pytest.raises(ValueError, match=r"token id 700 "):
        c([{"tokens": np.array([1, 2, 3])}, {"tokens": np.array([700, 1, 1])}])


def test_stream_map_reports_training_stream_indices():
    c = TextCollator(max_seq_len=2, pad_token_id=0, stream_map=[1, 3])
    out = c([{"tokens": np.array([1, 2]), "_stream": k} for k in (0, 1, 1)])
    assert out["stream_id"].dtype == torch.int64 and out["stream_id"].tolist() == [1, 3, 3]


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    path = tmp_path_factory.mktemp("split") / "train"
    rng = np.random.default_rng(0)
    with MDSWriter(out=str(path), columns={"tokens": "ndarray:uint16"}, size_limit=1 << 12) as w:
        for i in range(40):
            w.write({"tokens": rng.integers(1, 60_000, size=8 if i % 3 else 5, dtype=np.uint16)})
    return str(path)


def _loader(path, **kw):
    ds = StreamingDataset(local=path, batch_size=4, shuffle=True, shuffle_seed=3, num_canonical_nodes=2)
    collate = TextCollator(max_seq_len=8, pad_token_id=0, vocab_size=65_536)
    return TextLoader(ds, batch_size=4, collate_fn=collate, drop_last=True, **kw)


def test_text_loader_packs_in_workers_with_the_same_batches(tokens, monkeypatch):
    calls = []
    original = TextCollator.pack
    monkeypatch.setattr(TextCollator, "pack", lambda self, s: calls.append(os.getpid()) or original(self, s))
    in_process = list(_loader(tokens))
    assert set(calls) == {os.getpid()}
    workers = _loader(tokens, num_workers=2, persistent_workers=True)
    # workers collate whole batches with the worker half and send them in shared-memory slots
    assert isinstance(workers._grouped.dataset.collate.__self__, TextCollator)
    assert isinstance(workers._grouped.collate_fn, SharedBatchCollate)
    got = list(workers)
    assert len(got) == len(in_process) == 10
    for a, b in zip(got, in_process, strict=True):
        assert list(a) == list(b) and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    assert workers.state_dict()["sample_in_epoch"] == 40


def test_text_loader_batches_are_pinned_when_asked(tokens, monkeypatch, fake_accelerator):
    monkeypatch.setattr(collate, "empty_int64", _fake_pinned_empty)
    for workers in (0, 2):
        got = list(_loader(tokens, num_workers=workers, pin_memory=True))
        assert got and all(getattr(v, "_test_pinned", False) for b in got for v in b.values()), workers


def _fake_pinned_empty(shape, *, pin):
    out = torch.empty(shape, dtype=torch.int64)
    out._test_pinned = pin
    return out


def test_packed_rows_are_written_into_pinned_memory(monkeypatch):
    monkeypatch.setattr(collate, "empty_int64", _fake_pinned_empty)
    packed = PackedRows(np.array([[1, 2], [3, 0]], dtype=np.uint16), lengths=np.array([2, 1]))
    pinned, plain = packed.pin_memory(), packed.to_tensors()
    assert all(v._test_pinned for v in pinned.values()) and not any(v._test_pinned for v in plain.values())
    assert list(pinned) == list(plain) == ["input_ids", "labels", "attention_mask"]
    assert all(torch.equal(pinned[k], plain[k]) for k in plain)
    assert plain["labels"].tolist() == [[1, 2], [3, IGNORE_INDEX]]
