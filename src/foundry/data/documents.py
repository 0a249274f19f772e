"""Which document of a packed row each token belongs to: per-token sequence ids (pure numpy, no I/O).

Design note: pretraining rows concatenate documents, so a model that must not attend across them
(`attn_uses_sequence_id`) needs a (B, S) `sequence_id`. Two sources, both vectorised over the batch (no
per-token Python loop, this runs in every DataLoader worker):

* From separator tokens (llm-foundry's rule): a document ENDS AT AND INCLUDES its EOS, so the id of token t
  is the number of EOS tokens strictly before t. We add one thing llm-foundry keeps separate (its
  BOS-only mode): a BOS token STARTS a document. So `bos A eos bos B eos` splits into `[bos A eos]`,
  `[bos B eos]` (the BOS after an EOS does not open a third, empty document), and rows written with BOS only
  (`bos A bos B`) split too. When one token is both BOS and EOS (GPT-2's `<|endoftext|>`) it is treated as
  EOS only (it closes the document before it), otherwise it would form a document of its own.
* From explicit document lengths recorded by the converter (`--record_documents` writes a
  `document_lengths` column: the lengths of the row's pieces in order, summing to the row length). These
  are exact even when a document contains the separator token, and need no tokenizer.

Ids start at 0 in every row and increase by one per document. Truncating a row to `max_seq_len` simply
truncates its ids (a prefix of a row has a prefix of its ids), so both sources stay consistent with the
collator's truncation. Padding (right of the real tokens) gets its own id, one more than the last real
document's, so attention never mixes padding and text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "DOCUMENT_LENGTHS_COLUMN",
    "DocumentRule",
    "sequence_ids_from_lengths",
    "sequence_ids_from_tokens",
]

DOCUMENT_LENGTHS_COLUMN = "document_lengths"
"""MDS column holding a row's document lengths (written by `convert_dataset_hf.py --record_documents`)."""


@dataclass(frozen=True)
class DocumentRule:
    """How a row without a `document_lengths` column splits into documents.

    Attributes:
        eos_id: A document ends at (and includes) this token; None: not used.
        bos_id: A document starts at this token; None: not used (ignored when equal to `eos_id`).
    """

    eos_id: int | None = None
    bos_id: int | None = None

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> DocumentRule:
        """The tokenizer's EOS and BOS ids (None without a tokenizer: rows then need `document_lengths`)."""
        if tokenizer is None:
            return cls()
        return cls(eos_id=tokenizer.eos_token_id, bos_id=tokenizer.bos_token_id)

    @property
    def has_separator(self) -> bool:
        """Whether token ids alone can split a row (otherwise rows need a `document_lengths` column)."""
        return self.eos_id is not None or self.bos_id is not None


def sequence_ids_from_tokens(
    tokens: np.ndarray, *, rule: DocumentRule, lengths: np.ndarray | None = None
) -> np.ndarray:
    """Per-token document ids of right-padded rows, from separator tokens.

    Args:
        tokens: (B, S) token ids.
        rule: The separators.
        lengths: (B,) real tokens per row (the rest is padding); None: no padding.

    Returns:
        (B, S) int64 ids: 0 for the first document of each row, +1 at every boundary; padding gets
        the last real document's id + 1.
    """
    tokens = np.asarray(tokens)
    bsz, seq = tokens.shape
    # starts[:, t]: token t opens a new document (t > 0)
    starts = np.zeros((bsz, seq), dtype=bool)
    if rule.eos_id is not None:
        starts[:, 1:] |= tokens[:, :-1] == rule.eos_id
    if rule.bos_id is not None and rule.bos_id != rule.eos_id:
        starts[:, 1:] |= tokens[:, 1:] == rule.bos_id
    if lengths is None:
        return np.cumsum(starts, axis=1, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    # (B, S)
    real = np.arange(seq)[None, :] < lengths[:, None]
    ids = np.cumsum(starts & real, axis=1, dtype=np.int64)
    last = ids[np.arange(bsz), np.clip(lengths - 1, 0, None)] if seq else np.zeros(bsz, np.int64)
    pad_id = np.where(lengths > 0, last + 1, 0)
    return np.where(real, ids, pad_id[:, None])


def sequence_ids_from_lengths(
    doc_lengths: list[np.ndarray], *, lengths: np.ndarray | None = None, seq: int
) -> np.ndarray:
    """Per-token document ids of right-padded rows, from each row's recorded document lengths.

    Args:
        doc_lengths: Per row, the (n,) positive lengths of its documents in order (they may sum to more
            than the row's length when the row was truncated).
        lengths: (B,) real tokens per row (the rest is padding); None: every row has `seq` tokens.
        seq: Row length S.

    Returns:
        (B, S) int64 ids; padding gets the last real document's id + 1.

    Raises:
        ValueError: A length is not positive, or a row's lengths cover fewer tokens than it has.
    """
    bsz = len(doc_lengths)
    real_len = np.full(bsz, seq, dtype=np.int64) if lengths is None else np.asarray(lengths, dtype=np.int64)
    per_row = [np.asarray(d, dtype=np.int64).reshape(-1) for d in doc_lengths]
    for lens, n in zip(per_row, real_len, strict=True):
        if (lens <= 0).any() or int(lens.sum()) < n:
            raise ValueError(
                f"column {DOCUMENT_LENGTHS_COLUMN!r} = {lens.tolist()} does not describe a row of {n} tokens "
                "(lengths must be positive and sum to the row length); re-convert the dataset with "
                "--record_documents, or drop the column to fall back to EOS-based document ids"
            )
    # a document boundary at every end offset but the last; then padding opens one more document
    ends = [np.cumsum(lens[:-1]) for lens in per_row]
    rows = np.repeat(np.arange(bsz), [len(e) for e in ends])
    cols = np.concatenate(ends) if bsz else np.empty(0, dtype=np.int64)
    keep = cols < real_len[rows]
    starts = np.zeros((bsz, seq + 1), dtype=bool)
    starts[rows[keep], cols[keep]] = True
    # padding (or nothing, at column S)
    starts[np.arange(bsz), real_len] |= real_len > 0
    return np.cumsum(starts[:, :seq], axis=1, dtype=np.int64)
