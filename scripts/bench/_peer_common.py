"""What every library's driver in the network-latency benchmark shares (``streaming_remote.py --compare``).

Design note: a driver runs under its library's own virtual environment (ours: the project's; peers: the
reference venvs), so this module needs only the standard library and numpy. The dataset is the same for every
library: ``samples`` rows of ``tokens`` (2048 int32, drawn from a fixed pool) and ``id``. The timing is the
same too: from before the dataset is constructed (startup included: index fetch, worker start) to the first
batch and to the end of one shuffled epoch, printed as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

TOKENS = 2048


def pool() -> np.ndarray:
    """64 rows of tokens; sample ``i`` is row ``i % 64``."""
    return np.random.default_rng(0).integers(0, 50_000, size=(64, TOKENS), dtype=np.int32)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    write = sub.add_parser("write", help="write the dataset in the library's own format to a local folder")
    write.add_argument("--out", required=True)
    write.add_argument("--samples", type=int, required=True)
    write.add_argument("--shard-mib", type=int, required=True)
    read = sub.add_parser("read", help="one shuffled epoch from the remote copy into an empty cache")
    read.add_argument("--remote", required=True)
    read.add_argument("--cache", required=True)
    read.add_argument("--workers", type=int, required=True)
    read.add_argument("--batch", type=int, default=32)
    read.add_argument("--endpoint", required=True)
    return parser.parse_args()


def write_mds(args: argparse.Namespace, writer: Any) -> None:  # either library's MDSWriter class
    """The benchmark's dataset as MDS shards of ``args.shard_mib`` MiB, with ``writer`` (ours or upstream's: the
    same arguments and format)."""
    rows = pool()
    columns = {"tokens": "ndarray:int32:2048", "id": "int"}
    with writer(out=args.out, columns=columns, size_limit=args.shard_mib << 20) as w:
        for i in range(args.samples):
            w.write({"tokens": rows[i % 64], "id": i})


def timed_epoch(build: Callable[[], Iterable[Any]], count: Callable[[Any], int]) -> None:
    """Print ``{"first_batch_s", "epoch_s", "samples"}`` for one pass over ``build()``'s loader."""
    start = time.perf_counter()
    first, n = None, 0
    for batch in build():
        if first is None:
            first = time.perf_counter() - start
        n += count(batch)
    print(
        json.dumps({"first_batch_s": first, "epoch_s": time.perf_counter() - start, "samples": n}), flush=True
    )
