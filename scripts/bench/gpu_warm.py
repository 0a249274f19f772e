"""Compile the speed matrix's block graphs ahead of it, in parallel processes, into inductor's on-disk caches.

`make gpu-check` starts one of these per (size, block graph) while the GPU tests run: each builds a one-block
model of that size (compiled as the matrix compiles it), runs one forward and backward on one microbatch of the
matrix's shape, and exits. A block's graph does not depend on the number of blocks nor on the loss (CPU check:
a 3-block model with the chunked loss compiled from the cache a 1-block model with the plain loss filled:
FX-graph and AOTAutograd cache hits, no miss), so the matrix's compiled configurations then find their graphs
in the cache (each row reports `fxgraph_cache` hits and misses) and its budget goes to measuring instead of
compiling one graph after another. One line per graph: its seconds and cache counts, or its error; exit 1
when any failed (on CPU an FP8 refusal does not count).

    python scripts/bench/gpu_warm.py --sizes mpt-1b --configs compiled fp8
    python scripts/bench/gpu_warm.py --device cpu --sizes mpt-tiny --configs compiled   # CPU check
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_matrix import (
    SIZES,
    autocast,
    batches,
    build,
    cache_counts,
    config_name,
    emit,
    error_text,
    for_size,
    free,
    micro_batch,
    spec,
)


def warm(size: str, config: str, *, device: torch.device) -> dict[str, Any]:
    """Compiles `config`'s block graph at `size` in a one-block model (one forward and backward on one
    microbatch of the matrix's shape), filling inductor's on-disk caches: a matrix run in another process then
    finds the graph there (a block's graph does not depend on the number of blocks or the loss). The row says
    its seconds and the cache counts (misses: compiled here), or its error."""
    start = time.monotonic()
    before = cache_counts()
    _d, _h, _l, _mb, vocab, seq = SIZES[size]
    mb = micro_batch(size, config)
    try:
        # the chunked loss whatever the configuration's (the loss is outside the block graph): several warm-ups
        # share the GPU, and full logits at a large micro-batch would not fit beside each other
        model, forward = build(size, config, device=device, layers=1, loss_fn="chunked_crossentropy")
        ids = batches(1, batch=mb, seq=seq, vocab=vocab)[0].to(device)
        with autocast(device):
            loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        del model, forward, loss
        row: dict[str, Any] = {"warm": size, "config": config, "fxgraph_cache": cache_counts(since=before)}
    except Exception as e:  # a warm-up's failure is its line; the matrix compiles for itself
        row = {"warm": size, "config": config, "error": error_text(e)}
    free(device)
    row["seconds"] = round(time.monotonic() - start, 1)
    return row


def warm_targets(sizes: list[str], configs: list[str]) -> list[tuple[str, str]]:
    """(size, config) to compile, one per distinct block graph: configurations that differ only in the loss
    share one (the loss is outside the blocks), while the FP8 recipe, the attention kernel and the micro-batch
    (`@N`: the graph's shape) each make their own; eager has none. Each is compiled as the first configuration
    that needs it."""
    seen: set[tuple[str, str, str, int]] = set()
    out = []
    for size in sizes:
        for config in for_size(size, configs):
            s = spec(config)
            key = (size, s.fp8, s.attn, micro_batch(size, config))
            if s.mode != "none" and key not in seen:
                seen.add(key)
                out.append((size, config))
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--sizes", nargs="+", default=["mpt-1b"], choices=list(SIZES))
    p.add_argument("--configs", nargs="+", default=["compiled", "fp8"], type=config_name)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    device = torch.device(args.device)
    failed = False
    for size, config in warm_targets(args.sizes, args.configs):
        row = warm(size, config, device=device)
        emit(row)
        failed |= "error" in row and (device.type == "cuda" or not spec(config).fp8)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
