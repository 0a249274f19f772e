"""Finetuning batches: padded rows (one example each) or packed rows (several, kept apart by `sequence_id`).

Design note: both produce (B, S) int64 tensors with S = max_seq_len (fixed shapes). Padded rows carry
`input_ids`, `labels` (-100 on padding) and `attention_mask`. Packed rows add `sequence_id` (0, 1, ... per
example in the row, -1 on padding): the models' attention never crosses ids, and the first label of every
example after the first is -100, since the model would predict it from the previous example's last token
(llm-foundry does the same). So an example's loss is the same packed or alone. `Packer` is the one stateful
piece: partly filled bins carried to the next step, exported by `state_dict` as plain token lists (JSON-able,
small: at most `max_leftover_bins` rows) so a resumed run continues with the same bins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from foundry.data.finetune.masks import IGNORE_INDEX, Example
from foundry.data.finetune.packing import pack_bins

__all__ = ["Packer", "pack_rows", "pad_rows"]


def pad_rows(examples: Sequence[Example], *, max_seq_len: int, pad_token_id: int) -> dict[str, torch.Tensor]:
    """One example per row, right-padded to `max_seq_len`: `input_ids`, `labels`, `attention_mask` (B, S)."""
    b = len(examples)
    input_ids = torch.full((b, max_seq_len), pad_token_id, dtype=torch.int64)
    labels = torch.full((b, max_seq_len), IGNORE_INDEX, dtype=torch.int64)
    mask = torch.zeros((b, max_seq_len), dtype=torch.int64)
    for i, ex in enumerate(examples):
        n = len(ex)
        input_ids[i, :n] = torch.tensor(ex.input_ids, dtype=torch.int64)
        labels[i, :n] = torch.tensor(ex.labels, dtype=torch.int64)
        mask[i, :n] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": mask}


def pack_rows(
    rows: Sequence[Sequence[Example]], *, max_seq_len: int, pad_token_id: int
) -> dict[str, torch.Tensor]:
    """Several examples per row: `input_ids`, `labels`, `attention_mask`, `sequence_id` (B, S)."""
    batch = pad_rows([_concat(row) for row in rows], max_seq_len=max_seq_len, pad_token_id=pad_token_id)
    seq = torch.full((len(rows), max_seq_len), -1, dtype=torch.int64)
    for r, row in enumerate(rows):
        start = 0
        for k, ex in enumerate(row):
            seq[r, start : start + len(ex)] = k
            start += len(ex)
    batch["sequence_id"] = seq
    return batch


def _concat(row: Sequence[Example]) -> Example:
    ids: list[int] = []
    labels: list[int] = []
    for k, ex in enumerate(row):
        ids += ex.input_ids
        labels += ([IGNORE_INDEX] if k else list(ex.labels[:1])) + list(ex.labels[1:])
    return Example(tuple(ids), tuple(labels))


class Packer:
    """Packs each step's examples into `num_rows` rows, carrying leftover bins (see `packing.pack_bins`).

    Args:
        num_rows: Rows per batch (the device batch size).
        max_seq_len: Row length.
        pad_token_id: Padding id.
        max_leftover_bins: Leftover bins kept between steps (None: all).
    """

    def __init__(
        self, *, num_rows: int, max_seq_len: int, pad_token_id: int, max_leftover_bins: int | None
    ) -> None:
        self.num_rows = num_rows
        self.max_seq_len = max_seq_len
        self.pad_token_id = pad_token_id
        self.max_leftover_bins = max_leftover_bins
        self.leftovers: list[list[Example]] = []
        self.dropped_examples = 0
        """Examples in bins beyond `max_leftover_bins` (never trained on)."""

    def __call__(self, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
        """Packs `examples` with the leftovers; returns the batch and keeps the new leftovers."""
        pool = [ex for b in self.leftovers for ex in b] + list(examples)
        open_bins, k = [], 0
        for b in self.leftovers:
            open_bins.append(list(range(k, k + len(b))))
            k += len(b)
        packing = pack_bins(
            [len(ex) for ex in pool],
            open_bins=open_bins,
            new=range(k, len(pool)),
            num_bins=self.num_rows,
            max_len=self.max_seq_len,
            max_leftover_bins=self.max_leftover_bins,
        )
        self.leftovers = [[pool[i] for i in b] for b in packing.leftovers]
        self.dropped_examples += sum(len(b) for b in packing.dropped)
        rows = [[pool[i] for i in b] for b in packing.rows]
        return pack_rows(rows, max_seq_len=self.max_seq_len, pad_token_id=self.pad_token_id)

    def state_dict(self) -> dict[str, Any]:
        return {
            "leftovers": [[[list(ex.input_ids), list(ex.labels)] for ex in b] for b in self.leftovers],
            "dropped_examples": self.dropped_examples,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.leftovers = [[Example(tuple(ids), tuple(lab)) for ids, lab in b] for b in state["leftovers"]]
        self.dropped_examples = int(state["dropped_examples"])
