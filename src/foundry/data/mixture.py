"""Data mixtures: building `streaming.Stream`s from the `data.streams.<name>` entries.

Design note: a mixture is a dict of named streams (`data.streams`), so Hydra's own operations edit it from the
command line: change a weight (`data.streams.c4.proportion=0.5`), add a stream from a source file
(`+data/streams@data.streams.code=the-stack`), drop one (`~data.streams.arxiv`). A stream names where its data
is by a layout path (`path`) under two roots shared by every stream (`data.local_root`, `data.remote_root`),
so one override moves the whole mixture (stand-in data, another bucket); explicit `local` / `remote` win. The
dict's order is the stream order: it fixes the sample order and the stream index that tags every sample
(`stream_tag`), which the trainer maps back to names. Evaluation reads every stream that has an `eval_split`,
each sample once, unshuffled; its samples carry their *training* stream index (`eval_streams` gives the map,
`foundry.data.collate.TextCollator(stream_map=)` applies it), so a stream keeps one index whether or not the
streams before it are evaluated. The entries' schema (`StreamConfig`) and its compose-time checks
(`check_streams`) are in `foundry.data.config`, re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from foundry.data.config import StreamConfig, check_streams
from streaming import Stream
from streaming.storage.url import join_url

__all__ = [
    "STREAM_TAG",
    "StreamConfig",
    "build_streams",
    "check_streams",
    "eval_streams",
    "stream_location",
]

STREAM_TAG = "_stream"
"""The sample key carrying a sample's stream index (`StreamingDataset(stream_tag=...)`)."""


def stream_location(
    s: StreamConfig, *, local_root: str | None, remote_root: str | None
) -> tuple[str | None, str | None]:
    """`(local, remote)` of a stream: explicit values, else the layout path under the roots."""
    local = s.local
    if local is None and s.path is not None and local_root is not None:
        local = join_url(local_root, s.path)
    remote = s.remote
    if remote is None and s.path is not None and remote_root is not None:
        remote = join_url(remote_root, s.path)
    return local, remote


def build_streams(
    streams: Mapping[str, StreamConfig],
    *,
    local_root: str | None,
    remote_root: str | None,
    split: str | None,
    eval_mode: bool = False,
) -> list[Stream]:
    """One `streaming.Stream` per stream config, in dict order.

    Args:
        streams: The mixture.
        local_root: `data.local_root`.
        remote_root: `data.remote_root`.
        split: Default split (`data.train_split`) of streams whose `split` is null; unused with `eval_mode`.
        eval_mode: Build the eval streams instead: each stream's `eval_split`, no weights (every sample once).
            Pass only streams that have an `eval_split` (`eval_streams`).
    """
    out = []
    for s in streams.values():
        local, remote = stream_location(s, local_root=local_root, remote_root=remote_root)
        weights: dict[str, Any] = (
            {} if eval_mode else {"proportion": s.proportion, "repeat": s.repeat, "choose": s.choose}
        )
        out.append(
            Stream(
                local=local,
                remote=remote,
                split=s.eval_split if eval_mode else (s.split if s.split is not None else split),
                download_retry=s.download_retry,
                download_timeout=s.download_timeout,
                validate_hash=s.validate_hash,
                keep_zip=s.keep_zip,
                **weights,
            )
        )
    return out


def eval_streams(streams: Mapping[str, StreamConfig]) -> tuple[dict[str, StreamConfig], list[int]]:
    """The evaluated streams (those with an `eval_split`) and each one's index in the training mixture."""
    names = list(streams)
    chosen = {n: s for n, s in streams.items() if s.eval_split is not None}
    return chosen, [names.index(n) for n in chosen]
