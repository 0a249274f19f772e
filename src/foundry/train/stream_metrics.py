"""Per-stream metrics of a data mixture: eval loss/perplexity per stream and train-time samples/tokens per
stream.

Design note: a mixture's batches carry `stream_id`, a (B,) int64 tensor naming each row's stream by index
into the trainer's `stream_names`. It is bookkeeping, never a model input (`model_inputs` drops it). Rows
are attributed to streams with a (B, K) comparison matrix rather than `index_add_`/`one_hot`, so nothing
synchronises with the device (an id outside [0, K) matches no stream; the totals then fall short of the
row count, which the caller checks once, at reduce time, with a message naming the mismatch) and CUDA's
deterministic mode accepts it. Per-row losses come from the logits the model returns, shifted exactly like
the models' own loss (MPT's `shifted_cross_entropy` and transformers' `ForCausalLMLoss`: position t predicts
label t+1, -100 ignored, fp32), so a stream's loss is token-weighted within the stream, as the mixture's is.

Train-time counts accumulate on the device (`StreamCounter.add`, no sync) and are summed over ranks only
when `flush` is called (at log steps, when a checkpoint reads the run state, at the end of `fit`): one small
all-reduce, not one per microbatch. Counts are kept by *name*, so a resumed run whose mixture gained,
lost or renamed streams keeps the history of every stream it ever drew from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

from foundry.parallel.dist import all_reduce_sum

__all__ = [
    "STREAM_ID",
    "StreamCounter",
    "check_rows",
    "check_stream_names",
    "model_inputs",
    "require_names",
    "row_losses",
    "stream_eval_metrics",
    "stream_matrix",
]

STREAM_ID = "stream_id"
"""The batch key: (B,) int64, each row's stream index (into `stream_names`)."""

IGNORE_INDEX = -100


def model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`batch` without the keys the model must not see (`stream_id`);
    the same dict object when it has none."""
    if STREAM_ID not in batch:
        return batch
    return {k: v for k, v in batch.items() if k != STREAM_ID}


def check_stream_names(names: Sequence[str] | None) -> tuple[str, ...] | None:
    """Validates the trainer's `stream_names` (index -> name) and returns them as a tuple.

    Raises:
        ValueError: Empty list, a duplicate, or a name that cannot be a metric path segment.
    """
    if names is None:
        return None
    out = tuple(names)
    if not out:
        raise ValueError("stream_names is empty: pass None for data without streams, or one name per stream")
    for name in out:
        if not isinstance(name, str) or not name or "/" in name or name != name.strip():
            raise ValueError(
                f"stream name {name!r} cannot name a metric (eval/<name>/loss): use a non-empty name "
                "without '/' or surrounding spaces"
            )
    dupes = sorted({n for n in out if out.count(n) > 1})
    if dupes:
        raise ValueError(f"stream_names has duplicates {dupes}: every stream needs its own name")
    return out


def require_names(names: tuple[str, ...] | None) -> tuple[str, ...]:
    """The names, or a clear error when batches carry `stream_id` but the trainer was given none."""
    if names is None:
        raise ValueError(
            f"batches carry '{STREAM_ID}' but the Trainer has no stream_names: pass "
            "Trainer(stream_names=[...]) (index -> stream name) or drop the stream key from the dataset"
        )
    return names


def stream_matrix(stream_id: torch.Tensor, num_streams: int) -> torch.Tensor:
    """(B, K) bool: row b belongs to stream k. Ids outside [0, K) give an all-false row (no device sync)."""
    ids = stream_id.reshape(-1, 1)
    return ids == torch.arange(num_streams, device=ids.device, dtype=ids.dtype).reshape(1, -1)


def row_losses(
    logits: torch.Tensor, labels: torch.Tensor, *, max_elements: int = 1 << 27
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row summed next-token cross-entropy and loss-token counts, shifted like the models' own loss.

    Args:
        logits: (B, S, V), as the model returned them (any dtype; computed in fp32 like the model's loss).
        labels: (B, S); position t's logits predict `labels[:, t + 1]`; -100 is ignored.
        max_elements: Rows are done in chunks of at most this many fp32 logits (bounds the extra memory
            to 512 MiB whatever the eval batch; per-token losses do not depend on the chunking).

    Returns:
        (B,) float64 loss sums and (B,) int64 token counts; their totals over rows divided give the model's
        mean loss.
    """
    rows, seq, vocab = logits.shape
    targets = labels[:, 1:]
    step = max(1, max_elements // max(1, (seq - 1) * vocab))
    sums = []
    for lo in range(0, rows, step):
        ce = F.cross_entropy(
            logits[lo : lo + step, :-1].reshape(-1, vocab).float(),
            targets[lo : lo + step].reshape(-1),
            ignore_index=IGNORE_INDEX,
            reduction="none",
        )
        sums.append(ce.view(-1, seq - 1).double().sum(dim=1))
    return torch.cat(sums), (targets != IGNORE_INDEX).sum(dim=1)


def stream_eval_metrics(
    names: Sequence[str], loss_sums: Sequence[float], tokens: Sequence[float]
) -> dict[str, float]:
    """`eval/<name>/loss` (token-weighted within the stream) and `eval/<name>/perplexity`, for every stream
    that had loss tokens."""
    out: dict[str, float] = {}
    for name, total, count in zip(names, loss_sums, tokens, strict=True):
        if count > 0:
            mean = total / count
            out[f"eval/{name}/loss"] = mean
            out[f"eval/{name}/perplexity"] = math.exp(min(mean, 700.0))
    return out


def check_rows(matched: float, rows: float, names: Sequence[str]) -> None:
    """Raises when some rows' `stream_id` named no stream (their totals would silently go missing)."""
    if matched != rows:
        raise ValueError(
            f"{int(rows - matched)} of {int(rows)} rows have a '{STREAM_ID}' outside [0, {len(names)}): the "
            f"data's streams and Trainer(stream_names={list(names)}) disagree; pass one name per stream index"
        )


class StreamCounter:
    """Samples and loss tokens consumed per stream, cumulative over the run and summed over all ranks.

    Args:
        names: Stream index -> name (the batches' `stream_id` indexes it).
        device: Where the pending (not yet reduced) counts live.
    """

    def __init__(self, names: Sequence[str], *, device: torch.device) -> None:
        self.names = tuple(names)
        self.totals: dict[str, dict[str, int]] = {n: {"samples": 0, "tokens": 0} for n in self.names}
        self._pending = torch.zeros(2 * len(self.names) + 1, dtype=torch.int64, device=device)
        self._unflushed = 0

    def add(self, stream_id: torch.Tensor, labels: torch.Tensor) -> None:
        """Counts one device batch's rows and loss tokens (`labels[:, 1:] != -100`) per stream; no sync."""
        member = stream_matrix(stream_id.to(self._pending.device), len(self.names)).long()
        tokens = (labels[:, 1:] != IGNORE_INDEX).sum(dim=1).to(self._pending.device)
        k = len(self.names)
        self._pending[:k] += member.sum(dim=0)
        self._pending[k : 2 * k] += (member * tokens.reshape(-1, 1)).sum(dim=0)
        self._pending[-1] += stream_id.shape[0]
        self._unflushed += 1

    def flush(self) -> None:
        """Sums the pending counts over ranks into the totals (a collective: every rank calls it at the same
        points; a no-op, with no communication, when no batch was added since the last flush)."""
        if self._unflushed == 0:
            return
        counts = all_reduce_sum(self._pending.clone()).tolist()
        self._pending.zero_()
        self._unflushed = 0
        k = len(self.names)
        check_rows(sum(counts[:k]), counts[-1], self.names)
        for i, name in enumerate(self.names):
            self.totals[name]["samples"] += int(counts[i])
            self.totals[name]["tokens"] += int(counts[k + i])

    def metrics(self) -> dict[str, float]:
        """`train/<name>/samples` and `train/<name>/tokens` for every stream (call `flush` first); empty while
        no batch carried `stream_id` (data without streams logs nothing per stream)."""
        out: dict[str, float] = {}
        if not any(c["samples"] for c in self.totals.values()):
            return out
        for name, counts in self.totals.items():
            out[f"train/{name}/samples"] = float(counts["samples"])
            out[f"train/{name}/tokens"] = float(counts["tokens"])
        return out

    def state_dict(self) -> dict[str, dict[str, int]]:
        """The flushed totals by stream name (call `flush` first on every rank)."""
        return {name: dict(counts) for name, counts in self.totals.items()}

    def load_state_dict(self, state: Mapping[str, Mapping[str, int]]) -> None:
        """Restores totals by name; streams new to this run start at 0, ones no longer mixed keep their
        history."""
        for name, counts in state.items():
            self.totals[name] = {"samples": int(counts["samples"]), "tokens": int(counts["tokens"])}
