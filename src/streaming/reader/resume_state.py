"""The resume state of ``StreamingDataset``: what it records and how a loaded state is checked.

Design note: pure functions over plain dicts. ``dataset_config`` is the part of a state that must match for
the sample order to continue unchanged (shuffle, partition, batching, sampling, epoch size, and a fingerprint
of the streams' indexes and weights); ``build_state`` adds where the run stands; ``resume_mismatches``
compares a loaded state with the dataset and lists every difference (empty list: resumable), so the dataset
only applies the counters. Keeping the check pure makes it testable without a dataset and is the one place to
extend. A state also lists each stream (``stream_summary``: where, fingerprint, samples per epoch), so a
changed mixture is reported stream by stream (``mixture_changes``); with ``on_mixture_change="continue"`` the
streams and the epoch size they add up to may differ (the run keeps its position and draws the rest from the
new mixture). A state records the ``plan_version`` of its shuffle's order (``streaming.plan.plan_version``;
absent: 1): a state saved mid-epoch under another version is refused (``plan_mismatch``), one at an epoch
boundary resumes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from stackbase.bounded import short_repr as show
from streaming.plan.shuffle import plan_version

__all__ = [
    "CHECKED_KEYS",
    "MIXTURE_KEYS",
    "ON_MIXTURE_CHANGE",
    "STATE_VERSION",
    "UPSTREAM_ORDER",
    "build_state",
    "check_state_version",
    "check_upstream_state",
    "dataset_config",
    "from_upstream",
    "is_upstream_state",
    "mixture_changes",
    "plan_mismatch",
    "resume_mismatches",
    "stream_summary",
    "streams_fingerprint",
]

STATE_VERSION = 1
CHECKED_KEYS = (
    "shuffle",
    "shuffle_algo",
    "shuffle_seed",
    "shuffle_block_size",
    "partition_algo",
    "batching_method",
    "sampling_method",
    "sampling_granularity",
    "epoch_size",
    "streams_fingerprint",
)
MIXTURE_KEYS = ("epoch_size", "streams_fingerprint")
"""Checked keys that follow from the streams and their weights:
the ones ``on_mixture_change="continue"`` lets differ."""
ON_MIXTURE_CHANGE = ("error", "continue")


def streams_fingerprint(stream_fingerprints: Sequence[str], choose_per_stream: Sequence[int]) -> str:
    """A short hash of every stream's fingerprint and the samples each stream contributes per epoch."""
    blob = json.dumps([*stream_fingerprints, list(choose_per_stream)], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def dataset_config(
    *,
    shuffle: bool,
    shuffle_algo: str,
    shuffle_seed: int,
    shuffle_block_size: int,
    partition_algo: str,
    batching_method: str,
    sampling_method: str,
    sampling_granularity: int,
    epoch_size: int,
    fingerprint: str,
    upstream_order: bool = False,
) -> dict[str, Any]:
    """The checked part of a state (keys ``CHECKED_KEYS``, and ``plan_version``); ``shuffle_block_size`` is
    the effective one. ``upstream_order``: the shuffle follows mosaicml-streaming's own order (``order``
    key)."""
    return {
        **({"order": UPSTREAM_ORDER} if upstream_order else {}),
        "shuffle": shuffle,
        "shuffle_algo": shuffle_algo,
        "shuffle_seed": shuffle_seed,
        "shuffle_block_size": shuffle_block_size,
        "partition_algo": partition_algo,
        "batching_method": batching_method,
        "sampling_method": sampling_method,
        "sampling_granularity": sampling_granularity,
        "epoch_size": epoch_size,
        "streams_fingerprint": fingerprint,
        "plan_version": plan_version(shuffle_algo if shuffle else None),
    }


def build_state(
    *,
    epoch: int,
    sample_in_epoch: int,
    global_batch_size: int | None,
    num_canonical_nodes: int,
    initial_physical_nodes: int | None,
    config: dict[str, Any],
    streams: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A versioned, JSON-serializable resume state (``streams``: one ``stream_summary`` per stream)."""
    return {
        **({"streams": streams} if streams is not None else {}),
        "version": STATE_VERSION,
        "epoch": epoch,
        "sample_in_epoch": sample_in_epoch,
        "global_batch_size": global_batch_size,
        "num_canonical_nodes": num_canonical_nodes,
        "initial_physical_nodes": initial_physical_nodes,
        **config,
    }


UPSTREAM_ORDER = "mosaicml-streaming"
"""``order`` of a state whose run shuffles in mosaicml-streaming's own order (it started on that library)."""

UPSTREAM_KEYS = frozenset({"epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed"})
"""What mosaicml-streaming's ``StreamingDataset.state_dict()`` holds (plus, since 0.7,
``initial_physical_nodes``): what Composer checkpoints of runs on that library carry."""


def is_upstream_state(obj: Any) -> bool:
    """Whether ``obj`` is a mosaicml-streaming state dict (no ``version``; exactly its keys)."""
    return (
        isinstance(obj, dict)
        and "version" not in obj
        and UPSTREAM_KEYS <= set(obj) <= UPSTREAM_KEYS | {"initial_physical_nodes"}
    )


_MAX_COUNT = 2**62
"""Epochs and sample counts past this are not a run's position (they overflow the plan's int64 arithmetic)."""


def _count(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= _MAX_COUNT


def check_upstream_state(obj: dict[str, Any]) -> None:
    """The fields of a mosaicml-streaming state (``is_upstream_state``) have their types and ranges.

    Raises:
        ValueError: Naming the field and its value.
    """
    for key in ("epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed"):
        if not _count(obj[key], 1 if key == "num_canonical_nodes" else 0):
            low = 1 if key == "num_canonical_nodes" else 0
            raise ValueError(f"mosaicml-streaming state: {key} must be an int >= {low}, got {show(obj[key])}")
    nodes = obj.get("initial_physical_nodes")
    if nodes is not None and not _count(nodes, 1):
        raise ValueError(
            f"mosaicml-streaming state: initial_physical_nodes must be an int >= 1, got {show(nodes)}"
        )


def from_upstream(obj: dict[str, Any], *, shuffle_seed: int, config: dict[str, Any]) -> dict[str, Any]:
    """A mosaicml-streaming state as one of ours, resuming at the same sample.

    Upstream's state says where the run stands (epoch, samples consumed in it globally), the canonical nodes
    and the physical nodes it started on, and the seed; everything else about the order comes from the
    dataset's arguments, so ``config`` (the dataset's ``dataset_config`` with the state's canonical nodes) is
    taken as the state's. The canonical nodes are the state's, as upstream does.

    Raises:
        ValueError: A field of the wrong type, or a seed other than the dataset's (upstream silently switches
            to the state's seed; here the dataset must be built with it, so its epoch sizes agree).
    """
    check_upstream_state(obj)
    nodes = obj.get("initial_physical_nodes")
    if obj["shuffle_seed"] != shuffle_seed:
        raise ValueError(
            f"the mosaicml-streaming state was saved with shuffle_seed={obj['shuffle_seed']}, this dataset "
            f"has shuffle_seed={shuffle_seed}: build the dataset with shuffle_seed={obj['shuffle_seed']} to "
            "continue that run's order"
        )
    return build_state(
        epoch=obj["epoch"],
        sample_in_epoch=obj["sample_in_epoch"],
        global_batch_size=None,
        num_canonical_nodes=obj["num_canonical_nodes"],
        initial_physical_nodes=nodes,  # None: this run's nodes, as upstream
        config=config,
    )


def check_state_version(obj: Any) -> None:
    """Raises ValueError unless ``obj`` is a state dict of ``STATE_VERSION`` whose position (``epoch``,
    ``sample_in_epoch``) and recorded world (``global_batch_size``, ``initial_physical_nodes``) have their
    types and ranges (each named with its value)."""
    if not isinstance(obj, dict) or obj.get("version") != STATE_VERSION:
        got = obj.get("version") if isinstance(obj, dict) else type(obj).__name__
        raise ValueError(f"not a StreamingDataset state of version {STATE_VERSION} (got version {show(got)})")
    wrong = [
        f"{key} must be an int >= {low}{' or null' if optional else ''}, got {show(obj.get(key))}"
        for key, low, optional in (
            ("epoch", 0, False),
            ("sample_in_epoch", 0, False),
            ("global_batch_size", 1, True),
            ("initial_physical_nodes", 1, True),
        )
        if not ((optional and obj.get(key) is None) or _count(obj.get(key), low))
    ]
    if wrong:
        raise ValueError(f"not a valid StreamingDataset state: {'; '.join(wrong)}")


def stream_summary(*, where: str, fingerprint: str, choose: int) -> dict[str, Any]:
    """One stream as a state records it: its location (credentials redacted), fingerprint,
    samples per epoch."""
    return {"where": where, "fingerprint": fingerprint, "samples_per_epoch": int(choose)}


def mixture_changes(saved: Sequence[dict[str, Any]], current: Sequence[dict[str, Any]]) -> list[str]:
    """What differs between two lists of ``stream_summary`` (streams matched by ``where``), one line each."""
    old = {s["where"]: s for s in saved}
    new = {s["where"]: s for s in current}
    out = [f"stream {w} removed" for w in old if w not in new]
    out += [
        f"stream {w} added ({new[w]['samples_per_epoch']} samples per epoch)" for w in new if w not in old
    ]
    for w in [w for w in new if w in old]:
        a, b = old[w], new[w]
        if a["samples_per_epoch"] != b["samples_per_epoch"]:
            out.append(f"stream {w}: samples per epoch {a['samples_per_epoch']} -> {b['samples_per_epoch']}")
        elif a["fingerprint"] != b["fingerprint"]:
            out.append(f"stream {w}: its index.json or weight setting changed")
    if not out and [s["where"] for s in saved] != [s["where"] for s in current]:
        out.append("stream order: " + ", ".join(old) + " -> " + ", ".join(new))
    return out


def _summaries(value: Any) -> bool:
    """Whether a state's ``streams`` is a list of ``stream_summary`` dicts
    (a crafted one may hold anything)."""
    keys = ("where", "fingerprint", "samples_per_epoch")
    return isinstance(value, list) and all(
        isinstance(s, dict) and all(k in s for k in keys) and isinstance(s["where"], str) for s in value
    )


def plan_mismatch(obj: dict[str, Any], mine: dict[str, Any]) -> str | None:
    """Why the state ``obj`` cannot continue its epoch in this version's order (None: it can).

    Only a state saved inside an epoch (``0 < sample_in_epoch < epoch_size``) depends on the order; a state
    without ``plan_version`` predates it (version 1).
    """
    saved, now = obj.get("plan_version", 1), mine["plan_version"]
    at, size = obj.get("sample_in_epoch", 0), obj.get("epoch_size")
    if saved == now or not isinstance(at, int) or at <= 0 or (isinstance(size, int) and at >= size):
        return None
    algo = mine["shuffle_algo"] if mine["shuffle"] else "none"
    return (
        f"plan_version: the state was saved {at} samples into epoch {show(obj.get('epoch'))} under plan "
        f"version {show(saved)} of shuffle_algo={algo!r}, and this version of the library orders that epoch "
        f"differently (plan version {now}), so it cannot continue it in the same order; finish the epoch "
        "with the library version that saved the state, or restart the epoch in the new order by setting the "
        "state's 'sample_in_epoch' to 0"
    )


def resume_mismatches(
    obj: dict[str, Any],
    *,
    ncn_arg: int | None,
    config_for: Callable[[int], dict[str, Any]],
    on_mixture_change: str = "error",
    streams: Sequence[dict[str, Any]] | None = None,
) -> list[str]:
    """Every way the state ``obj`` does not match the dataset (empty: it can be resumed).

    Args:
        obj: A state of ``STATE_VERSION`` (see ``check_state_version``).
        ncn_arg: The dataset's ``num_canonical_nodes`` argument (None: taken from the state).
        config_for: The dataset's ``dataset_config`` for a given number of canonical nodes (the default
            shuffle block size depends on it).
        on_mixture_change: ``error``: the streams must match; ``continue``: ``MIXTURE_KEYS`` may differ.
        streams: The dataset's ``stream_summary`` list (names each changed stream when the state has one too).
    """
    if on_mixture_change not in ON_MIXTURE_CHANGE:
        raise ValueError(
            f"on_mixture_change must be one of {', '.join(ON_MIXTURE_CHANGE)}; got {on_mixture_change!r}"
        )
    ncn = obj.get("num_canonical_nodes")
    diffs = []
    if ncn_arg is not None and ncn != ncn_arg:
        diffs.append(f"num_canonical_nodes: state has {show(ncn)}, dataset has {ncn_arg!r}")
    if not _count(ncn, 1):
        diffs.append(f"num_canonical_nodes: state has {show(ncn)}, expected an int >= 1")
    if diffs:
        return diffs
    mine = config_for(ncn)  # type: ignore[arg-type]
    skip = MIXTURE_KEYS if on_mixture_change == "continue" else ()
    diffs = []
    for k in (k for k in CHECKED_KEYS if k not in skip and obj.get(k) != mine[k]):
        detail = []
        if k == "streams_fingerprint" and streams is not None and _summaries(obj.get("streams")):
            detail = mixture_changes(obj["streams"], streams)
        if detail:
            diffs.append("streams_fingerprint: the stream mixture changed: " + "; ".join(detail))
        else:
            diffs.append(f"{k}: state has {show(obj.get(k))}, dataset has {mine[k]!r}")
    # another difference already changes the order
    plan = plan_mismatch(obj, mine) if not diffs else None
    return [*diffs, plan] if plan else diffs
