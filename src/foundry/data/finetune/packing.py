"""Packing several finetuning examples into each row:
deterministic first-fit-decreasing bins, and `auto` ratio.

Design note: these functions decide which example goes into which row, so they are pure (sizes in, indices
out) and property-tested. The semantics follow llm-foundry's `BinPackCollator`: a step reads
`int(device_batch_size * packing_ratio)` examples, sorts them by length (longest first; ties by arrival),
and puts each into the first bin (leftover bins from earlier steps first, in their order) where it fits,
opening a new bin otherwise; when only as many examples remain as bins are still missing, each opens its
own bin, so a step emits `device_batch_size` rows whenever it can. The fullest bins are emitted (ties by
bin order) and the rest are kept as leftovers for the next step (at most `max_leftover_bins`; the emptiest
beyond that are dropped and counted as waste). Unlike llm-foundry, a bin keeps its position when it
grows (llm-foundry moves it to the end), which makes the order easy to state. `choose_packing_ratio` is
llm-foundry's `auto`: profile ratios from 1 to `max_seq_len / 100` and take the largest one before the
first whose wasted share of tokens exceeds `max_waste` (0 in llm-foundry).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "PackingProfile",
    "Packing",
    "choose_packing_ratio",
    "candidate_ratios",
    "pack_bins",
    "profile_packing",
]


@dataclass(frozen=True)
class Packing:
    """One step's bins, as lists of item indices (items in the order they were placed)."""

    rows: list[list[int]]
    """The emitted bins (at most `num_bins`), fullest first."""
    leftovers: list[list[int]]
    """Bins kept for the next step."""
    dropped: list[list[int]]
    """Bins beyond `max_leftover_bins` (their examples are not trained on)."""


def pack_bins(
    sizes: Sequence[int],
    *,
    open_bins: Sequence[Sequence[int]],
    new: Sequence[int],
    num_bins: int,
    max_len: int,
    max_leftover_bins: int | None,
) -> Packing:
    """Places the items `new` into `open_bins` (then new bins) first-fit-decreasing; see the module note.

    Args:
        sizes: Token count of every item an index can name.
        open_bins: Leftover bins from the previous step (lists of item indices).
        new: Indices of this step's items, in arrival order.
        num_bins: Rows to emit (the device batch size).
        max_len: Capacity of a bin (max_seq_len); every item must fit in an empty bin.
        max_leftover_bins: Leftover bins to keep (None: all).
    """
    if num_bins <= 0 or max_len <= 0:
        raise ValueError(f"num_bins={num_bins} and max_len={max_len} must be > 0")
    bins = [list(b) for b in open_bins]
    fill = [sum(sizes[i] for i in b) for b in bins]
    order = sorted(new, key=lambda i: (-sizes[i], i))
    for k, item in enumerate(order):
        size = sizes[item]
        if size > max_len:
            raise ValueError(f"item {item} has {size} tokens, more than a bin holds ({max_len})")
        missing = num_bins - len(bins)
        target = -1
        if len(order) - k > missing:
            target = next((b for b in range(len(bins)) if fill[b] + size <= max_len), -1)
        if target < 0:
            bins.append([item])
            fill.append(size)
        else:
            bins[target].append(item)
            fill[target] += size
    ranked = sorted(range(len(bins)), key=lambda b: (-fill[b], b))
    rows = [bins[b] for b in ranked[:num_bins]]
    rest = [bins[b] for b in ranked[num_bins:]]
    keep = len(rest) if max_leftover_bins is None else max_leftover_bins
    return Packing(rows=rows, leftovers=rest[:keep], dropped=rest[keep:])


@dataclass(frozen=True)
class PackingProfile:
    """What packing a sample of the data at one ratio gives."""

    ratio: float
    padding: float
    """Share of emitted row positions that are padding."""
    waste: float
    """Share of the sample's tokens not emitted (dropped or still in leftover bins at the end)."""


def profile_packing(
    sizes: Sequence[int],
    *,
    ratio: float,
    device_batch_size: int,
    max_len: int,
    max_leftover_bins: int | None,
) -> PackingProfile | None:
    """Simulates packing `sizes` (in order) in steps of `int(ratio * device_batch_size)` examples.

    A final step with fewer than `device_batch_size` examples is skipped (as llm-foundry). None when no step
    ran (the sample is smaller than a device batch).
    """
    step = int(ratio * device_batch_size)
    open_bins: list[list[int]] = []
    emitted = total = rows = 0
    for start in range(0, len(sizes), step):
        new = list(range(start, min(start + step, len(sizes))))
        if len(new) < device_batch_size:
            continue
        total += sum(sizes[i] for i in new)
        packing = pack_bins(
            sizes,
            open_bins=open_bins,
            new=new,
            num_bins=device_batch_size,
            max_len=max_len,
            max_leftover_bins=max_leftover_bins,
        )
        emitted += sum(sizes[i] for row in packing.rows for i in row)
        rows += device_batch_size
        open_bins = packing.leftovers
    if rows == 0 or total == 0:
        return None
    return PackingProfile(ratio=ratio, padding=1 - emitted / (rows * max_len), waste=1 - emitted / total)


def candidate_ratios(*, max_len: int, device_batch_size: int, count: int = 20) -> list[float]:
    """llm-foundry's candidates: `count` ratios from 1 to `max_len / 100` rounded to 0.1,
    one per raw batch size."""
    ratios: list[float] = []
    seen: set[int] = set()
    for r in np.linspace(1.0, max_len / 100, count):
        r = float(np.round(10 * r) / 10)
        raw = int(r * device_batch_size)
        if raw not in seen:
            seen.add(raw)
            ratios.append(r)
    return ratios


def choose_packing_ratio(
    sizes: Sequence[int],
    *,
    device_batch_size: int,
    max_len: int,
    max_leftover_bins: int | None,
    max_waste: float = 0.0,
) -> float:
    """The largest candidate ratio before the first that wastes more than `max_waste` of the tokens.

    `sizes` is a sample of the data (llm-foundry takes 100 times the largest raw batch). Returns 1.0 when
    `max_len <= 100` or nothing but 1 qualifies.
    """
    if max_len <= 100:
        return 1.0
    best = 1.0
    for ratio in candidate_ratios(max_len=max_len, device_batch_size=device_batch_size):
        prof = profile_packing(
            sizes,
            ratio=ratio,
            device_batch_size=device_batch_size,
            max_len=max_len,
            max_leftover_bins=max_leftover_bins,
        )
        if prof is None or prof.waste > max_waste:
            break
        best = ratio
    return best
