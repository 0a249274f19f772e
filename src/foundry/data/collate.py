"""The pretraining collate function: sample dicts with `tokens` (or legacy `text`) -> `input_ids` / `labels` (B, S).

It is picklable (DataLoader workers run it), so all text-specific work happens here and the dataset stays the
generic `streaming.StreamingDataset`. Unlike llm-foundry, packed rows keep their EOS labels even when pad == eos:
only real padding is ignored.

Optional keys, all computed with whole-batch numpy ops (no per-token Python loop):
* `sequence_id` (B, S) int64 when built with `documents=DocumentRule(...)`: which document of a packed row
  each token belongs to (`foundry.data.documents`: a row's recorded `document_lengths` column when it has
  one, else its EOS/BOS tokens; padding gets an id of its own).
* `stream_id` (B,) int64 when samples carry the `_stream` int key (the index of the stream of a mixture
  that each sample came from; per-stream metrics read it, the model never sees it).
"""

from __future__ import annotations

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

__all__ = ["IGNORE_INDEX", "STREAM_KEY", "TextCollator"]

IGNORE_INDEX = -100
STREAM_KEY = "_stream"
"""Sample key holding the int index of the sample's stream; batched as `stream_id` (B,)."""


class TextCollator:
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
    """

    def __init__(
        self,
        *,
        max_seq_len: int,
        pad_token_id: int,
        token_encoding_type: str = "int64",
        tokenizer: Any = None,  # noqa: ANN401 - a transformers tokenizer, only for text rows
        vocab_size: int | None = None,
        documents: DocumentRule | None = None,
    ) -> None:
        self.max_seq_len = max_seq_len
        self.pad_token_id = pad_token_id
        self.dtype = np.dtype(token_encoding_type)
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.documents = documents

    def _row(self, sample: dict[str, Any]) -> np.ndarray:
        if "tokens" in sample:
            tokens = sample["tokens"]
            if isinstance(tokens, bytes | bytearray | memoryview):
                tokens = np.frombuffer(tokens, dtype=self.dtype)
            row = np.asarray(tokens)[: self.max_seq_len].astype(np.int64)
            if self.vocab_size is not None and len(row) and int(row.max()) >= self.vocab_size:
                raise ValueError(
                    f"the dataset has token id {int(row.max())} but model.vocab_size={self.vocab_size}: set "
                    f"model.vocab_size above the largest id (a multiple of 64, e.g. {round_vocab_size(int(row.max()) + 1)}), "
                    "or check that data.local holds data tokenized for this model"
                )
            return row
        if "text" in sample:
            if self.tokenizer is None:
                raise ValueError(
                    "dataset rows have a 'text' column but there is no tokenizer (tokenizer.name is null): pass "
                    "tokenizer.name=/path/to/tokenizer.json, or convert the data to token ids first"
                )
            ids = self.tokenizer(sample["text"], truncation=True, max_length=self.max_seq_len)["input_ids"]
            return np.asarray(ids, dtype=np.int64)
        raise KeyError(f"dataset rows need a 'tokens' or 'text' column; got columns {sorted(sample)}")

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Returns `input_ids` and `labels` (B, S) int64; `attention_mask` only when a row was padded;
        `sequence_id` (B, S) with `documents`; `stream_id` (B,) when samples carry `_stream`."""
        rows = [self._row(s) for s in samples]
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        seq = int(lengths.max())
        padded = bool((lengths != seq).any())
        if not padded:
            ids = np.stack(rows)  # (B, S)
        else:
            ids = np.full((len(rows), seq), self.pad_token_id, dtype=np.int64)
            for i, r in enumerate(rows):
                ids[i, : len(r)] = r
        input_ids = torch.from_numpy(ids)
        batch = {"input_ids": input_ids}
        if padded:
            mask = torch.from_numpy(np.arange(seq)[None, :] < lengths[:, None]).to(torch.int64)
            batch["labels"] = input_ids.masked_fill(mask == 0, IGNORE_INDEX)
            batch["attention_mask"] = mask
        else:
            batch["labels"] = input_ids.clone()
        if self.documents is not None:
            doc_ids = _sequence_ids(samples, ids, rule=self.documents, lengths=lengths if padded else None)
            batch["sequence_id"] = torch.from_numpy(doc_ids)
        if STREAM_KEY in samples[0]:
            batch["stream_id"] = torch.tensor([self._stream(s) for s in samples], dtype=torch.int64)
        return batch

    @staticmethod
    def _stream(sample: dict[str, Any]) -> int:
        if STREAM_KEY not in sample:
            raise KeyError(
                f"some samples of a batch carry {STREAM_KEY!r} and some do not (got columns {sorted(sample)})"
            )
        return int(sample[STREAM_KEY])


def _sequence_ids(
    samples: list[dict[str, Any]], ids: np.ndarray, *, rule: DocumentRule, lengths: np.ndarray | None
) -> np.ndarray:
    """(B, S) document ids: a row's recorded `document_lengths` where it has them, its separators otherwise."""
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
    if recorded.any():  # a mixture of streams converted with and without --record_documents
        which = np.flatnonzero(recorded)
        docs = [samples[i][DOCUMENT_LENGTHS_COLUMN] for i in which]
        sub_len = None if lengths is None else lengths[which]
        out[which] = sequence_ids_from_lengths(docs, lengths=sub_len, seq=ids.shape[1])
    return out
