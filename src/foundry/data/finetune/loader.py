"""The finetuning loader: examples (in memory or streamed from MDS) -> padded or packed (B, S) batches.

Design note: one wrapper, two example sources. In-memory rows (files, HF datasets) are validated and
tokenized once at build time (bad rows fail there, naming the row; rows with no loss token left are dropped
and counted), then each epoch takes a seeded permutation (`seed`, `epoch`), and each rank (or replication
group) a strided share of it cut to equal length. MDS rows go through `streaming`'s partitioning and
shuffling (`StreamingDataLoader`, resumable); workers tokenize them, and rows dropped there are replaced by
the next rows (every step full, every rank the same number of steps per epoch). A step reads
`int(device_batch_size * packing_ratio)` examples (the device batch when not packing). The loader's state is
the source's position plus the packer's leftover bins, so `load_state_dict` then `iter` gives the batches an
uninterrupted run would have given. Like a DataLoader, each `iter()` is one epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from foundry.data.finetune.collate import Packer, pad_rows
from foundry.data.finetune.masks import Example
from foundry.data.finetune.tokenize import ExampleBuilder

__all__ = ["FinetuneLoader", "MemoryExamples", "StreamedExamples"]

log = logging.getLogger(__name__)


class MemoryExamples:
    """A rank's share of in-memory examples, in steps of `step` examples, one epoch per `iter()`.

    Args:
        examples: All examples (already filtered).
        step: Examples per step.
        min_step: A final step with fewer examples is dropped
            (the device batch size, or `step` with drop_last).
        group: This rank's replication group; `num_groups` groups share the data.
        seed: Permutation seed; shuffle: permute each epoch (else the stored order).
    """

    def __init__(
        self,
        examples: Sequence[Example],
        *,
        step: int,
        min_step: int,
        group: int,
        num_groups: int,
        seed: int,
        shuffle: bool,
    ) -> None:
        self.examples = examples
        self.step, self.min_step = step, min_step
        self.group, self.num_groups = group, num_groups
        self.seed, self.shuffle = seed, shuffle
        self.epoch = 0
        self.consumed = 0

    def shard(self, epoch: int) -> np.ndarray:
        n = len(self.examples)
        order = np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle else np.arange(n)
        return order[self.group :: self.num_groups][: n // self.num_groups]

    def __len__(self) -> int:
        """Steps per epoch (a final step shorter than `min_step` is dropped)."""
        full, rest = divmod(len(self.examples) // self.num_groups, self.step)
        return full + int(0 < rest and rest >= self.min_step)

    def __iter__(self) -> Iterator[list[Example]]:
        shard = self.shard(self.epoch)
        while self.consumed < len(shard):
            chunk = shard[self.consumed : self.consumed + self.step]
            if len(chunk) < self.min_step:
                break
            self.consumed += len(chunk)
            yield [self.examples[i] for i in chunk]
        self.epoch, self.consumed = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.consumed = int(state["epoch"]), int(state["consumed"])


class _BuildExamples:
    """Collate function for MDS rows: raw or tokenized rows -> `{"examples": [Example | None, ...]}`."""

    def __init__(self, builder: ExampleBuilder) -> None:
        self.builder = builder

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, list[Example | None]]:
        return {"examples": [self.builder(dict(row)) for row in rows]}


class StreamedExamples:
    """MDS examples through `StreamingDataLoader` (streaming's partitioning, shuffling and resumption).

    Rows that give no example (no loss token within `max_seq_len`) are skipped and counted, and the step is
    refilled from the following rows, so every step holds exactly `step` examples. With `fill` (training),
    every `iter()` yields exactly `len(self)` steps on every rank, whatever each rank dropped (ranks stay in
    lockstep): a rank short of rows at the stream's epoch end reads on into the stream's next epoch, and
    examples read but not yet yielded (`carry`) are part of the state. Without `fill` (eval), one `iter()`
    reads the stream's epoch once and yields the remainder as a final shorter step (at least `min_step`).

    Args:
        loader: A `StreamingDataLoader` whose collate function is `_BuildExamples` and batch size `step`.
        step: Examples per step.
        min_step: The final step of a non-`fill` pass is dropped when it has fewer examples.
        fill: Yield exactly `len(self)` full steps per `iter()` (see above).
    """

    def __init__(
        self,
        # streaming.StreamingDataLoader
        loader: Any,
        *,
        step: int,
        min_step: int,
        fill: bool,
    ) -> None:
        self.loader = loader
        self.step, self.min_step, self.fill = step, min_step, fill
        self.steps_per_epoch = len(loader)
        """A whole epoch's steps (`len(loader)` counts what is left of a resumed stream epoch)."""
        self.dropped_examples = 0
        self.carry: list[Example] = []
        """Kept examples read from the stream and not yet yielded."""
        self.steps_done = 0
        """Steps yielded in the current `fill` epoch."""
        self._batches: Iterator[dict[str, list[Example | None]]] | None = None
        self._pass_kept = 0

    def __len__(self) -> int:
        """Steps per epoch (the stream's batches per epoch)."""
        return self.steps_per_epoch

    def __iter__(self) -> Iterator[list[Example]]:
        return self._filled() if self.fill else self._one_pass()

    def _take(self, batch: dict[str, list[Example | None]]) -> int:
        kept = [ex for ex in batch["examples"] if ex is not None]
        self.dropped_examples += len(batch["examples"]) - len(kept)
        self.carry += kept
        return len(kept)

    def _filled(self) -> Iterator[list[Example]]:
        while self.steps_done < self.steps_per_epoch:
            # consecutive stream passes without a kept example (2: a whole epoch)
            empty_passes = 0
            while len(self.carry) < self.step:
                if self._batches is None:
                    self._batches, self._pass_kept = iter(self.loader), 0
                batch = next(self._batches, None)
                if batch is not None:
                    self._pass_kept += self._take(batch)
                    continue
                # the stream's epoch ended: read on into its next one
                self._batches = None
                empty_passes = empty_passes + 1 if self._pass_kept == 0 else 0
                if empty_passes >= 2:
                    raise ValueError(
                        "finetuning data: a whole epoch of the MDS split gave no example with a loss token "
                        "within max_seq_len (every row dropped): raise max_seq_len or check "
                        "data.target_prompts / data.target_responses"
                    )
            out, self.carry = self.carry[: self.step], self.carry[self.step :]
            self.steps_done += 1
            yield out
        self.steps_done = 0

    def _one_pass(self) -> Iterator[list[Example]]:
        self.carry = []
        for batch in self.loader:
            self._take(batch)
            while len(self.carry) >= self.step:
                out, self.carry = self.carry[: self.step], self.carry[self.step :]
                yield out
        rest, self.carry = self.carry, []
        if rest and len(rest) >= self.min_step:
            yield rest

    def state_dict(self) -> dict[str, Any]:
        return {
            "stream": self.loader.state_dict(),
            "dropped_examples": self.dropped_examples,
            "carry": [[list(ex.input_ids), list(ex.labels)] for ex in self.carry],
            "steps_done": self.steps_done,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["stream"])
        self.dropped_examples = int(state["dropped_examples"])
        self.carry = [Example(tuple(ids), tuple(lab)) for ids, lab in state.get("carry", [])]
        self.steps_done = int(state.get("steps_done", 0))
        self._batches = None

    @staticmethod
    def collate_fn(builder: ExampleBuilder) -> _BuildExamples:
        return _BuildExamples(builder)


class FinetuneLoader:
    """Yields padded or packed batches of (B, S) int64 tensors;
    `state_dict` / `load_state_dict` resume mid-epoch.

    Args:
        source: `MemoryExamples` or `StreamedExamples`.
        max_seq_len: Row length.
        pad_token_id: Padding id.
        packer: Packs steps into rows (None: one padded example per row).
        packing_ratio: The ratio in use (None when not packing), for logs and the trainer.
        dropped_examples: Examples dropped when the source was built (no loss token after truncation).
    """

    def __init__(
        self,
        source: MemoryExamples | StreamedExamples,
        *,
        max_seq_len: int,
        pad_token_id: int,
        packer: Packer | None,
        packing_ratio: float | None,
        dropped_examples: int = 0,
    ) -> None:
        self.source = source
        self.max_seq_len = max_seq_len
        self.pad_token_id = pad_token_id
        self.packer = packer
        self.packing_ratio = packing_ratio
        self.filtered_examples = dropped_examples

    @property
    def dropped_examples(self) -> int:
        """Examples never trained on: filtered (no loss tokens left), plus bins over the leftover limit."""
        streamed = self.source.dropped_examples if isinstance(self.source, StreamedExamples) else 0
        packed = self.packer.dropped_examples if self.packer is not None else 0
        return self.filtered_examples + streamed + packed

    def __len__(self) -> int:
        """Batches per epoch (what `plan_run` turns `ep` durations into steps with)."""
        return len(self.source)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for examples in self.source:
            if self.packer is not None:
                yield self.packer(examples)
            else:
                yield pad_rows(examples, max_seq_len=self.max_seq_len, pad_token_id=self.pad_token_id)

    def state_dict(self) -> dict[str, Any]:
        return {
            "source": self.source.state_dict(),
            "packer": None if self.packer is None else self.packer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.source.load_state_dict(state["source"])
        if self.packer is not None and state.get("packer") is not None:
            self.packer.load_state_dict(state["packer"])
