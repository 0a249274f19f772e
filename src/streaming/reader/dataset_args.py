"""Checks of ``StreamingDataset``'s arguments, each error naming the argument,
what it got and what is allowed.

Design note: pure functions of the arguments (and, for the cache limit, the shard sizes), so the dataset's
constructor reads as what it stores, and every rule is stated once.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from streaming.plan import BATCHING_METHODS, SHUFFLE_ALGOS
from streaming.reader.stream import Stream
from streaming.util.sizes import format_bytes

__all__ = ["check_cache_limit", "check_choices_and_bounds", "resolve_streams", "warn_on_settings"]


def resolve_streams(streams: Sequence[Stream] | None, remote: str | None, local: str | None) -> list[Stream]:
    """The dataset's streams: ``streams``, or one stream of ``remote``/``local``."""
    if streams is not None and (remote is not None or local is not None):
        raise ValueError("pass either streams or remote/local, not both")
    if streams is None:
        if remote is None and local is None:
            raise ValueError("StreamingDataset needs streams, or remote and/or local")
        streams = [Stream(remote=remote, local=local)]
    if not streams:
        raise ValueError("streams must not be empty")
    return list(streams)


def check_choices_and_bounds(
    *,
    choices: dict[str, str],
    bounds: dict[str, tuple[int | None, int]],
) -> None:
    """Raise ValueError for a choice outside its allowed values, or a number below its lower bound.

    Args:
        choices: ``sampling_method``, ``partition_algo``, ``shuffle_algo``, ``batching_method`` -> value.
        bounds: argument name -> (value or None when unset, lowest allowed value).
    """
    allowed = {
        "sampling_method": ("balanced", "fixed"),
        "partition_algo": ("orig", "relaxed"),
        "shuffle_algo": SHUFFLE_ALGOS,
        "batching_method": BATCHING_METHODS,
    }
    for name, value in choices.items():
        if value not in allowed[name]:
            # the prefix is upstream's
            prefix = f"Invalid sampling method: {value!r}; " if name == "sampling_method" else ""
            raise ValueError(f"{prefix}{name} must be one of {', '.join(allowed[name])}; got {value!r}")
    for name, (number, low) in bounds.items():
        if number is not None and number < low:
            raise ValueError(f"{name} must be >= {low}, got {number}")


def check_cache_limit(cache_limit: int | None, bytes_per_shard: np.ndarray, index_bytes: int = 0) -> None:
    """Raise ValueError when ``cache_limit`` is below 4x the largest shard (all of its files); the message is
    upstream's "Minimum cache usage" one when the limit is also at most the streams' index.json bytes
    (``index_bytes``), else its "Cache limit ... is too low" one. A limit of 4x the largest shard is accepted
    whatever the index size (the shards then keep that much; see ``StreamingDataset._shard_budget``)."""
    if cache_limit is None:
        return
    largest = int(bytes_per_shard.max()) if len(bytes_per_shard) else 0
    if cache_limit < 4 * largest and cache_limit <= index_bytes:
        raise ValueError(
            f"Minimum cache usage ({index_bytes} bytes) is larger than the cache limit ({cache_limit} "
            f"bytes): cache_limit={format_bytes(cache_limit)} is not even the size of the streams' "
            f"index.json files ({format_bytes(index_bytes)}); the minimum is 4x the largest shard, "
            f"{format_bytes(4 * largest)} ({4 * largest} bytes), so that the shards being read, prefetched "
            "and prepared fit at once; raise cache_limit or write smaller shards"
        )
    if cache_limit < 4 * largest:
        raise ValueError(
            f"Cache limit ({cache_limit} bytes) is too low. Increase the `cache_limit` to at-least four "
            f"times the largest shard size ({largest} bytes): cache_limit={format_bytes(cache_limit)} is too "
            f"small for this dataset: the minimum is 4x its largest shard, {format_bytes(4 * largest)} "
            f"({4 * largest} bytes), so that the shards being read, prefetched and prepared fit at once; "
            "raise cache_limit or write smaller shards"
        )


def warn_on_settings(
    *,
    batch_size: int | None,
    predownload: int | None,
    shuffle: bool,
    shuffle_algo: str,
    shuffle_block_size: int | None,
    largest_shard: int,
) -> None:
    """The warnings upstream gives for settings that work but cost throughput or shuffle quality."""
    if predownload is not None and batch_size and predownload < batch_size:
        warnings.warn(
            f"predownload < batch_size ({predownload} < {batch_size}). This may result in slower batch time. "
            "Recommendation is to set predownload to at-least batch_size: "
            f"predownload={predownload} is smaller than batch_size={batch_size}: every batch waits for "
            "shards prepared a few samples at a time; use predownload >= "
            "batch_size (default: 8 x batch_size)",
            stacklevel=3,
        )
    if (
        shuffle
        and shuffle_algo in ("py1e", "py1br")
        and shuffle_block_size
        and shuffle_block_size < largest_shard
    ):
        warnings.warn(
            "Shuffle block size was smaller than shard size for some shards: "
            f"shuffle_block_size={shuffle_block_size} is smaller than the largest shard ({largest_shard} "
            "samples): samples of such a shard are not mixed with other shards'; use a block of at least 10x "
            "the samples per shard",
            stacklevel=3,
        )
