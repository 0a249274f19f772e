"""The pretraining collate function: sample dicts with `tokens`
(or legacy `text`) -> `input_ids` / `labels` (B, S).

It is picklable (DataLoader workers run it), so all text-specific work happens here and the dataset stays the
generic `streaming.StreamingDataset`. Unlike llm-foundry, packed rows keep their EOS labels even when pad ==
eos: only real padding is ignored.

Design note: it is a `streaming.SplitCollator` in two halves, because what crosses the worker pipe dominates
at token-batch sizes. `pack` (in a worker) reads, truncates, pads and checks the rows and returns
`PackedRows`: one (B, S) array in the narrowest dtype that holds the stored ids and the pad id (int32 / uint16
for real data: a quarter or an eighth of int64), row lengths only when a row was padded, narrow document ids,
stream ids. `PackedRows.to_tensors` (in the rank process, or DataLoader's pin thread, which also pins) widens
to the int64 tensors the model gets and derives `labels` and `attention_mask`, which need no sample data.
Measured (2 workers, 32 x 2048 int32 tokens): two int64 tensors through shared memory ran at half the rate of
the plain loader's one int32 buffer. Calling the collator directly does both halves.

Optional keys, all computed with whole-batch numpy ops (no per-token Python loop):
* `sequence_id` (B, S) int64 when built with `documents=DocumentRule(...)`: which document of a packed row
  each token belongs to (`foundry.data.documents`: a row's recorded `document_lengths` column when it has
  one, else its EOS/BOS tokens; padding gets an id of its own).
* `stream_id` (B,) int64 when samples carry the `_stream` int key (the index of the stream of a mixture
  that each sample came from, mapped through `stream_map` when given; per-stream metrics read it, the model
  never sees it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from foundry.data.documents import (
    DOCUMENT_LENGTHS_COLUMN,
    DocumentRule,
    sequence_ids_from_lengths,
    sequence_ids_from_tokens,
)
from foundry.tokenizers import round_vocab_size
from streaming.loader.dataloader import SplitCollator, WorkerBatch
from streaming.reader.batch_read import ColumnBatch

__all__ = ["IGNORE_INDEX", "STREAM_KEY", "PackedRows", "TextCollator"]

IGNORE_INDEX = -100
STREAM_KEY = "_stream"
"""Sample key holding the int index of the sample's stream; batched as `stream_id` (B,)."""


@dataclass
class PackedRows(WorkerBatch):
    """A text batch in transit from a worker: everything `to_tensors` needs, in compact numpy arrays.

    Attributes:
        ids: (B, S) token ids (pad id after each row's end), any integer dtype.
        lengths: (B,) real tokens per row; None when no row was padded.
        sequence_id: (B, S) document ids (any integer dtype), or None.
        stream_id: (B,) int64 stream indices, or None.
    """

    ids: np.ndarray
    lengths: np.ndarray | None = None
    sequence_id: np.ndarray | None = None
    stream_id: np.ndarray | None = None

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """`input_ids` and `labels` (B, S) int64 (one tensor when no row was padded: the labels equal the ids,
        and a widening copy is a third of the rank's per-batch work); `attention_mask` only when a row was
        padded; `sequence_id` and `stream_id` when packed."""
        return self._build(pin=False)

    def pin_memory(self) -> dict[str, torch.Tensor]:
        """`to_tensors()` written straight into pinned memory (DataLoader's pin thread calls this): one pass
        over the narrow ids per tensor, no unpinned int64 copy to pin afterwards."""
        return self._build(pin=True)

    def _build(self, *, pin: bool) -> dict[str, torch.Tensor]:
        # numpy writes only: a torch op here (clone, masked_fill) runs torch's intra-op thread pool in the
        # rank process, which contends with the workers for the cores (measured: 20 ms per 512 KB clone on 2
        # busy cores, vs ~0.1 ms for numpy's single-threaded copy)
        def filled(value: np.ndarray) -> torch.Tensor:
            out = empty_int64(value.shape, pin=pin)
            # integer/bool widening (uint64 is packed as int64)
            np.copyto(out.numpy(), value, casting="unsafe")
            return out

        ids = self.ids
        batch = {"input_ids": filled(ids)}
        if self.lengths is not None:
            mask = np.arange(ids.shape[1])[None, :] < self.lengths[:, None]
            batch["labels"] = filled(ids)
            batch["labels"].numpy()[~mask] = IGNORE_INDEX
            batch["attention_mask"] = filled(mask)
        else:
            # one tensor: nothing writes into a batch (the model shifts labels into a new tensor)
            batch["labels"] = batch["input_ids"]
        if self.sequence_id is not None:
            batch["sequence_id"] = filled(self.sequence_id)
        if self.stream_id is not None:
            batch["stream_id"] = filled(self.stream_id)
        return batch


def empty_int64(shape: tuple[int, ...], *, pin: bool) -> torch.Tensor:
    """An uninitialized int64 tensor, in pinned (page-locked) memory when `pin` (needs an accelerator)."""
    return torch.empty(shape, dtype=torch.int64, pin_memory=pin)


class TextCollator(SplitCollator):
    """Collates sample dicts with `tokens` (ndarray or bytes) or `text` into model batches.

    Args:
        max_seq_len: Row length S; longer rows are truncated, shorter rows padded.
        pad_token_id: Id used for padding (its labels are -100).
        token_encoding_type: dtype of `bytes` token columns.
        tokenizer: Only needed for `text` rows.
        vocab_size: When given, a token id >= it is an error naming the id (instead of an index error deep in
            the model's embedding).
        documents: When given, batches carry `sequence_id` (B, S) (see the module note): how rows without a
            `document_lengths` column split into documents.
        stream_map: When given, a sample's `_stream` index i is reported as `stream_map[i]` (an eval dataset
            of some of the training streams reports training stream indices).
    """

    def __init__(
        self,
        *,
        max_seq_len: int,
        pad_token_id: int,
        token_encoding_type: str = "int64",
        # a transformers tokenizer, only for text rows
        tokenizer: Any = None,
        vocab_size: int | None = None,
        documents: DocumentRule | None = None,
        stream_map: Sequence[int] | None = None,
    ) -> None:
        self.max_seq_len = max_seq_len
        self.pad_token_id = pad_token_id
        self.dtype = np.dtype(token_encoding_type)
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.documents = documents
        self.stream_map = None if stream_map is None else np.asarray(stream_map, dtype=np.int64)
        # read on the workers' batch path (streaming.reader.batch_read): these columns only, `tokens` gathered
        self.columns = ("tokens", "text", *((DOCUMENT_LENGTHS_COLUMN,) if documents is not None else ()))

    def _row(self, sample: dict[str, Any]) -> tuple[np.ndarray, bool]:
        """The row's ids in their stored integer dtype (uint64 as int64), truncated; and whether it is a
        `tokens` row (checked against the vocabulary)."""
        if "tokens" in sample:
            tokens = sample["tokens"]
            if isinstance(tokens, bytes | bytearray | memoryview):
                tokens = np.frombuffer(tokens, dtype=self.dtype)
            row = np.asarray(tokens)[: self.max_seq_len]
            if row.dtype.kind not in "iu" or row.dtype == np.uint64:
                row = row.astype(np.int64)
            return row, True
        if "text" in sample:
            if self.tokenizer is None:
                raise ValueError(
                    "dataset rows have a 'text' column but there is no tokenizer (tokenizer.name is null): "
                    "pass tokenizer.name=/path/to/tokenizer.json, or convert the data to token ids first"
                )
            ids = self.tokenizer(sample["text"], truncation=True, max_length=self.max_seq_len)["input_ids"]
            return np.asarray(ids, dtype=np.int64), False
        raise KeyError(f"dataset rows need a 'tokens' or 'text' column; got columns {sorted(sample)}")

    def pack(self, samples: Sequence[dict[str, Any]]) -> PackedRows:
        """The worker half: rows -> one (B, S) array in the narrowest dtype holding the ids and the pad id.
        `samples` may be a `ColumnBatch` (the workers' batch read path):
        its gathered `tokens` are used as is."""
        columns = samples if isinstance(samples, ColumnBatch) else None
        full = self._gathered_rows(columns) if columns is not None else None
        if full is None:
            full = self._stack_full_rows(samples)
        if full is not None:
            ids, lengths, checked = full, np.full(len(samples), full.shape[1]), np.ones(len(samples), bool)
        else:
            ids, lengths, checked = self._pad_rows(samples)
        seq = ids.shape[1]
        padded = bool((lengths != seq).any())
        if self.vocab_size is not None:
            self._check_vocab(ids, lengths, checked)
        packed = PackedRows(ids, lengths=lengths if padded else None)
        if self.documents is not None:
            doc_ids = _sequence_ids(samples, ids, rule=self.documents, lengths=packed.lengths)
            packed.sequence_id = doc_ids.astype(np.int16 if seq < np.iinfo(np.int16).max else np.int32)
        if columns is not None and columns.tag == STREAM_KEY and columns.streams is not None:
            streams = columns.streams
            packed.stream_id = streams if self.stream_map is None else self.stream_map[streams]
        elif STREAM_KEY in samples[0]:
            streams = np.fromiter((self._stream(s) for s in samples), dtype=np.int64, count=len(samples))
            packed.stream_id = streams if self.stream_map is None else self.stream_map[streams]
        return packed

    def _gathered_rows(self, batch: ColumnBatch) -> np.ndarray | None:
        """`_stack_full_rows` of a batch whose `tokens` were gathered into one (B, L) integer array."""
        ids = batch.columns.get("tokens")
        if not (
            type(ids) is np.ndarray and ids.ndim == 2 and ids.dtype.kind in "iu" and ids.dtype != np.uint64
        ):
            return None
        return ids if ids.shape[1] <= self.max_seq_len else np.ascontiguousarray(ids[:, : self.max_seq_len])

    def _stack_full_rows(self, samples: Sequence[dict[str, Any]]) -> np.ndarray | None:
        """The common case in one copy: every sample's `tokens` is an ndarray of one length and integer dtype
        -> (B, min(length, S)); None otherwise (`_pad_rows` handles it)."""
        rows: list[Any] = [s.get("tokens") for s in samples]
        first = rows[0]
        if not (
            type(first) is np.ndarray
            and first.ndim == 1
            and first.dtype.kind in "iu"
            and first.dtype != np.uint64
        ):
            return None
        shape, dtype = first.shape, first.dtype
        if not all(type(r) is np.ndarray and r.shape == shape and r.dtype == dtype for r in rows):
            return None
        ids: np.ndarray = np.concatenate(rows).reshape(len(rows), shape[0])
        return ids if shape[0] <= self.max_seq_len else np.ascontiguousarray(ids[:, : self.max_seq_len])

    def _pad_rows(self, samples: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Any rows: (B, S) ids right-padded to the longest row (to `max_seq_len` when a row is `text`, as
        llm-foundry's text dataset tokenizes with `padding='max_length'`), (B,) lengths, (B,) which rows are
        `tokens`."""
        rows, checked = zip(*(self._row(s) for s in samples), strict=True)
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        seq = int(lengths.max()) if all(checked) else self.max_seq_len
        if not (lengths != seq).any():
            # (B, S) in the rows' common dtype
            return np.stack(rows), lengths, np.asarray(checked)
        dtype = np.promote_types(
            np.result_type(*{r.dtype for r in rows}), np.min_scalar_type(self.pad_token_id)
        )
        ids = np.full((len(rows), seq), self.pad_token_id, dtype=dtype)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
        return ids, lengths, np.asarray(checked)

    def _check_vocab(self, ids: np.ndarray, lengths: np.ndarray, checked: np.ndarray) -> None:
        """Raises naming the largest id of the first `tokens` row with an id >= `vocab_size`."""
        assert self.vocab_size is not None
        # one reduction in the common case
        if ids.size == 0 or ids.max() < self.vocab_size:
            return
        real = np.arange(ids.shape[1])[None, :] < lengths[:, None]
        maxes = np.where(real, ids, 0).max(axis=1) if (lengths < ids.shape[1]).any() else ids.max(axis=1)
        bad = np.flatnonzero(checked & (lengths > 0) & (maxes >= self.vocab_size))
        if bad.size:
            top = int(maxes[bad[0]])
            raise ValueError(
                f"the dataset has token id {top} but model.vocab_size={self.vocab_size}: set "
                "model.vocab_size above the largest id (a multiple of 64, e.g. "
                f"{round_vocab_size(top + 1)}), or check that data.local holds data tokenized for this model"
            )

    @staticmethod
    def _stream(sample: dict[str, Any]) -> int:
        if STREAM_KEY not in sample:
            raise KeyError(
                f"some samples of a batch carry {STREAM_KEY!r} and some do not (got columns {sorted(sample)})"
            )
        return int(sample[STREAM_KEY])


def _sequence_ids(
    samples: Sequence[dict[str, Any]], ids: np.ndarray, *, rule: DocumentRule, lengths: np.ndarray | None
) -> np.ndarray:
    """(B, S) document ids: a row's recorded `document_lengths` where it has them,
    its separators otherwise."""
    recorded = np.array([DOCUMENT_LENGTHS_COLUMN in s for s in samples])
    if recorded.all():
        docs = [s[DOCUMENT_LENGTHS_COLUMN] for s in samples]
        return sequence_ids_from_lengths(docs, lengths=lengths, seq=ids.shape[1])
    if not rule.has_separator:
        raise ValueError(
            f"document masking needs each row's document boundaries, but a row has no "
            f"{DOCUMENT_LENGTHS_COLUMN!r} column and no EOS token id is known: set tokenizer.name (its EOS "
            "separates documents), or convert the data with --record_documents"
        )
    out = sequence_ids_from_tokens(ids, rule=rule, lengths=lengths)
    # a mixture of streams converted with and without --record_documents
    if recorded.any():
        which = np.flatnonzero(recorded)
        docs = [samples[i][DOCUMENT_LENGTHS_COLUMN] for i in which.tolist()]
        sub_len = None if lengths is None else lengths[which]
        out[which] = sequence_ids_from_lengths(docs, lengths=sub_len, seq=ids.shape[1])
    return out
