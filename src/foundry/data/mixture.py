"""Data mixtures: the `data.streams.<name>` schema, its compose-time checks, and building `streaming.Stream`s.

Design note: a mixture is a dict of named streams (`data.streams`), so Hydra's own operations edit it from the
command line: change a weight (`data.streams.c4.proportion=0.5`), add a stream from a source file
(`+data/streams@data.streams.code=the-stack`), drop one (`~data.streams.arxiv`). A stream names where its data
is by a layout path (`path`) under two roots shared by every stream (`data.local_root`, `data.remote_root`), so
one override moves the whole mixture (stand-in data, another bucket); explicit `local` / `remote` win. The
dict's order is the stream order: it fixes the sample order and the stream index that tags every sample
(`stream_tag`), which the trainer maps back to names. Evaluation reads every stream that has an `eval_split`,
each sample once, unshuffled; its samples carry their *training* stream index (`eval_streams` gives the map,
`foundry.data.collate.TextCollator(stream_map=)` applies it), so a stream keeps one index whether or not the
streams before it are evaluated.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streaming import Stream
from streaming.format.hashing import check_validate_hash
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


@dataclass(kw_only=True)
class StreamConfig:
    """One source of a mixture (`data.streams.<name>`, options in `conf/data/streams/`)."""

    path: str | None = None
    """Layout path of the source under `data.local_root` and `data.remote_root` (e.g. `redpajama/arxiv`)."""
    local: str | None = None
    """Local directory (the cache of `remote`); null -> `<data.local_root>/<path>`."""
    remote: str | None = None
    """Remote URL; null -> `<data.remote_root>/<path>` (no remote when `data.remote_root` is null)."""
    split: str | None = None
    """Training split sub-directory; null -> `data.train_split`."""
    eval_split: str | None = None
    """Evaluation split sub-directory; null -> this stream is not evaluated."""
    proportion: float | None = None
    """Relative weight (all streams relative, or none); samples per epoch ~ proportion x epoch size."""
    repeat: float | None = None
    """Absolute multiplier: int(repeat x the stream's samples) per epoch."""
    choose: int | None = None
    """Absolute samples per epoch."""
    download_retry: int | None = None
    """Overrides `data.download_retry` for this stream."""
    download_timeout: float | None = None
    """Overrides `data.download_timeout` for this stream."""
    validate_hash: str | None = None
    """Overrides `data.validate_hash` for this stream."""
    keep_zip: bool | None = None
    """Overrides `data.keep_zip` for this stream."""


def _closest(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean data.streams.{close[0]}?)" if close else ""


def _check_one(
    name: str, s: StreamConfig, *, roots: tuple[str | None, str | None], others: list[str]
) -> None:
    key = f"data.streams.{name}"
    local_root, remote_root = roots
    if (
        s.local is None
        and s.remote is None
        and (s.path is None or (local_root is None and remote_root is None))
    ):
        raise ValueError(
            f"{key} has no location{_closest(name, others)}: give it a path (under data.local_root / "
            f"data.remote_root), or {key}.local / {key}.remote; streams come from conf/data/streams/<source>.yaml "
            f"(add one with +data/streams@{key}=<source>)"
        )
    weights = [(k, v) for k, v in (("proportion", s.proportion), ("repeat", s.repeat), ("choose", s.choose))]
    given = [k for k, v in weights if v is not None]
    if len(given) > 1:
        raise ValueError(
            f"{key} sets {' and '.join(given)}: set at most one of proportion, repeat, choose "
            f"(e.g. {key}.{given[1]}=null)"
        )
    for field_name, value in weights:
        if value is not None and value < 0:
            raise ValueError(f"{key}.{field_name}={value} must be >= 0")
    if s.download_retry is not None and s.download_retry < 0:
        raise ValueError(f"{key}.download_retry={s.download_retry} must be >= 0")
    if s.download_timeout is not None and s.download_timeout <= 0:
        raise ValueError(f"{key}.download_timeout={s.download_timeout} must be > 0")


def check_streams(
    streams: Mapping[str, StreamConfig],
    *,
    local_root: str | None,
    remote_root: str | None,
) -> None:
    """Compose-time checks of a mixture, each naming the `data.streams.<name>.<field>` to fix.

    Raises:
        ValueError: A stream without a location, with two weights or a negative one, an unknown hash, or
            streams mixing relative (`proportion`) and absolute (`repeat` / `choose` / none) weights.
    """
    names = list(streams)
    for name, s in streams.items():
        _check_one(name, s, roots=(local_root, remote_root), others=[n for n in names if n != name])
        check_validate_hash(s.validate_hash, name=f"data.streams.{name}.validate_hash")
    relative = [n for n, s in streams.items() if s.proportion is not None]
    absolute = [n for n, s in streams.items() if s.proportion is None]
    if relative and absolute:
        raise ValueError(
            f"data.streams mixes relative and absolute weights: {', '.join(relative)} set proportion but "
            f"{', '.join(absolute)} do not; give every stream a proportion (e.g. "
            f"data.streams.{absolute[0]}.proportion=0.1), or none (repeat / choose / every sample once)"
        )
    if relative and not any(streams[n].proportion for n in relative):
        raise ValueError(
            "data.streams: every proportion is 0; give at least one stream a positive proportion"
        )


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
