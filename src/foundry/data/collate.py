"""The pretraining collate function: sample dicts with `tokens` (or legacy `text`) -> `input_ids` / `labels` (B, S).

It is picklable (DataLoader workers run it), so all text-specific work happens here and the dataset stays the
generic `streaming.StreamingDataset`. Unlike llm-foundry, packed rows keep their EOS labels even when pad == eos:
only real padding is ignored.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from foundry.tokenizers import round_vocab_size

__all__ = ["IGNORE_INDEX", "TextCollator"]

IGNORE_INDEX = -100


class TextCollator:
    """Collates sample dicts with `tokens` (ndarray or bytes) or `text` into model batches.

    Args:
        max_seq_len: Row length S; longer rows are truncated, shorter rows padded.
        pad_token_id: Id used for padding (its labels are -100).
        token_encoding_type: dtype of `bytes` token columns.
        tokenizer: Only needed for `text` rows.
        vocab_size: When given, a token id >= it is an error naming the id (instead of an index error deep in
            the model's embedding).
    """

    def __init__(
        self,
        *,
        max_seq_len: int,
        pad_token_id: int,
        token_encoding_type: str = "int64",
        tokenizer: Any = None,  # noqa: ANN401 - a transformers tokenizer, only for text rows
        vocab_size: int | None = None,
    ) -> None:
        self.max_seq_len = max_seq_len
        self.pad_token_id = pad_token_id
        self.dtype = np.dtype(token_encoding_type)
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size

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
        """Returns `input_ids` and `labels` (B, S) int64; `attention_mask` only when a row was padded."""
        rows = [self._row(s) for s in samples]
        seq = max(len(r) for r in rows)
        if all(len(r) == seq for r in rows):
            input_ids = torch.from_numpy(np.stack(rows))  # (B, S)
            return {"input_ids": input_ids, "labels": input_ids.clone()}
        input_ids = torch.full((len(rows), seq), self.pad_token_id, dtype=torch.int64)
        mask = torch.zeros((len(rows), seq), dtype=torch.int64)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = torch.from_numpy(r)
            mask[i, : len(r)] = 1
        labels = input_ids.masked_fill(mask == 0, IGNORE_INDEX)
        return {"input_ids": input_ids, "labels": labels, "attention_mask": mask}
