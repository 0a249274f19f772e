"""Pretraining batches from tokenized MDS text: `tokens` rows -> `input_ids` / `labels` (B, S) int64 tensors.

Design note: the dataset stays the generic `streaming.StreamingDataset` (raw sample dicts); all
text-specific work (dtype cast, truncation to `max_seq_len`, padding of short rows with `-100` labels,
tokenizing legacy `text` rows) happens in a picklable collate function. So there is no dataset subclass to
keep in step with the streaming library, and resumption is exactly `StreamingDataLoader.state_dict()`.
Unlike llm-foundry, packed rows keep their EOS labels even when pad == eos: only real padding is ignored.
Rows of token ids need no tokenizer (pad id 0; ids are checked against the model's vocabulary instead).
The config has two forms: one dataset (`local` / `remote`, e.g. `data=c4`) or a mixture of named streams
(`streams`, see `foundry.data.mixture`, e.g. `data=mpt-7b-mix`); both reach every `StreamingDataset` knob,
checked here at compose time so a bad value names its `data.<field>` before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundry.data.collate import TextCollator
from foundry.data.documents import DocumentRule
from foundry.data.mixture import (
    STREAM_TAG,
    StreamConfig,
    build_streams,
    check_streams,
    eval_streams,
    stream_location,
)
from streaming.format.hashing import check_validate_hash
from streaming.plan import BATCHING_METHODS, SHUFFLE_ALGOS
from streaming.reader.world import World
from streaming.util.sizes import parse_bytes, parse_count

__all__ = [
    "MIXTURE_CHANGES",
    "TextDataConfig",
    "build_text_dataloader",
    "dataset_missing_message",
    "missing_data",
]

_TOKEN_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
MIXTURE_CHANGES = ("error", "continue")
"""`data.on_mixture_change`: what a resumed run does when its streams or weights differ from the checkpoint's."""
_CHOICES = {
    "sampling_method": ("balanced", "fixed"),
    "partition_algo": ("relaxed", "orig"),
    "batching_method": BATCHING_METHODS,
    "shuffle_algo": SHUFFLE_ALGOS,
    "on_mixture_change": MIXTURE_CHANGES,
    "token_encoding_type": _TOKEN_DTYPES,
}


@dataclass(kw_only=True)
class TextDataConfig:
    """Tokenized text in MDS (the `data` group): one dataset or a mixture of streams, and how to read it."""

    local: str | None = None
    """Local directory (the cache when `remote` is set; the dataset itself otherwise); null with `streams`."""
    remote: str | None = None
    """Remote URL of the dataset (any scheme the streaming storage layer supports), or null."""
    streams: dict[str, StreamConfig] = field(default_factory=dict)
    """A mixture: named streams (`conf/data/streams/`), in sample-order; empty -> the one dataset above."""
    local_root: str | None = None
    """Where stream layout paths live locally (`<local_root>/<stream path>/<split>`)."""
    remote_root: str | None = None
    """Where stream layout paths live remotely (null: streams are read from `local_root` alone)."""
    train_split: str = "train"
    """Split sub-directory used for training (with `streams`: the default of every stream's `split`)."""
    eval_split: str | None = "val"
    """Split used for evaluation (null: no eval); must be null with `streams` (each has its own eval_split)."""
    max_seq_len: int | None = None
    """Row length; null -> `model.max_seq_len`."""
    shuffle: bool = True
    """Shuffle training samples (eval is never shuffled)."""
    shuffle_algo: str = "py1e"
    """Streaming shuffle algorithm: naive, py1s, py2s, py1br, py1e."""
    shuffle_seed: int | None = None
    """Shuffle seed; null -> the run's `seed`."""
    shuffle_block_size: int | None = None
    """Block size of py1br/py1e (null: max(4_000_000 // num_canonical_nodes, 262144))."""
    num_canonical_nodes: int | None = None
    """Streaming's canonical nodes (fix it to keep the sample order when the world size changes)."""
    epoch_size: str | None = None
    """Samples per epoch (an int or `"100k"`, `"2b"`), split by proportion; null -> the streams' total."""
    sampling_method: str = "balanced"
    """`balanced` (a partial repeat draws new samples each epoch) or `fixed` (the same ones)."""
    sampling_granularity: int = 1
    """Samples per pick when a partial repeat is spread over shards (larger: fewer shards touched)."""
    partition_algo: str = "relaxed"
    """`relaxed` (any world) or `orig` (canonical and physical nodes divide each other)."""
    batching_method: str = "random"
    """`random`, `stratified` (each batch mirrors the proportions) or `per_stream` (each batch one stream)."""
    predownload: int | None = None
    """Samples a worker prepares ahead (null: 8 x device batch)."""
    cache_limit: str | None = None
    """Local cache budget for remote streams (bytes or `"10gb"`; null: unlimited); shards are evicted."""
    download_retry: int | None = None
    """At most this many extra attempts per shard download (null: as many as `download_budget` allows)."""
    download_timeout: float = 60.0
    """Seconds per shard download attempt."""
    download_budget: float = 300.0
    """Seconds a shard download keeps retrying transient store failures (outages) before the run fails."""
    validate_hash: str | None = None
    """How shards are verified: null (default) with the fastest digest index.json records, if any; an
    algorithm (e.g. `xxh64`, `sha1`) that index.json must record; `off`: no check."""
    keep_zip: bool = False
    """Keep compressed shards after decompressing them."""
    allow_unsafe_types: bool = False
    """Allow `pkl` columns (arbitrary code on read: trusted data only)."""
    replication: int | None = None
    """Consecutive ranks that get identical samples (tensor/sequence parallel groups)."""
    on_mixture_change: str = "error"
    """On resume with other streams or weights than the checkpoint's: `error`, or `continue` from its position."""
    num_workers: int = 0
    """DataLoader worker processes per rank."""
    pin_memory: bool | None = None
    """Hand out batches in pinned (page-locked) host memory, so copies to the GPU are faster and can overlap
    compute (with workers, DataLoader's pin thread writes the int64 tensors straight into pinned memory);
    null: pin when the run's device is CUDA (`trainer.device`), never on CPU runs."""
    token_encoding_type: str = "int64"
    """dtype of legacy `tokens` columns stored as raw `bytes` (ndarray columns carry their own dtype)."""
    create_hint: str = ""
    """What to run when the dataset is absent (shown in the error)."""

    def __post_init__(self) -> None:
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"data.{name}={getattr(self, name)!r}: use one of {', '.join(allowed)}")
        for name, low in (("num_workers", 0), ("download_retry", 0), ("predownload", 0), ("sampling_granularity", 1),
                          ("shuffle_seed", 0), ("shuffle_block_size", 1), ("num_canonical_nodes", 1),
                          ("replication", 1)):  # fmt: skip
            if getattr(self, name) is not None and getattr(self, name) < low:
                raise ValueError(f"data.{name}={getattr(self, name)} must be >= {low}")
        if self.download_timeout <= 0:
            raise ValueError(f"data.download_timeout={self.download_timeout} must be > 0")
        if self.download_budget < 0:
            raise ValueError(f"data.download_budget={self.download_budget} must be >= 0 seconds")
        check_validate_hash(self.validate_hash, name="data.validate_hash")
        for name, parse, example in (
            ("epoch_size", parse_count, "100k"),
            ("cache_limit", parse_bytes, "10gb"),
        ):
            if getattr(self, name) is not None:
                try:
                    parse(getattr(self, name), name=f"data.{name}")
                except ValueError as err:
                    raise ValueError(f"{err} (e.g. data.{name}={example})") from err
        self._check_form()

    def _check_form(self) -> None:
        if not self.streams:
            if self.local is None and self.remote is None:
                raise ValueError(
                    "data.local and data.remote are both null: set at least one (or data.streams)"
                )
            return
        for name in ("local", "remote", "eval_split"):
            if getattr(self, name) is not None:
                raise ValueError(
                    f"data.{name}={getattr(self, name)!r} is for a single dataset, but data.streams is set: use "
                    f"data.local_root / data.remote_root and per-stream fields (data.streams.<name>.{name}), or "
                    f"data.{name}=null"
                )
        check_streams(self.streams, local_root=self.local_root, remote_root=self.remote_root)
        if self.epoch_size is not None and any(s.proportion is None for s in self.streams.values()):
            raise ValueError(
                "data.epoch_size needs proportion weights on every stream (repeat/choose fix the size)"
            )

    @property
    def stream_names(self) -> list[str] | None:
        """The mixture's stream names in index order (the `_stream` tag of a sample indexes it); None: one dataset."""
        return list(self.streams) or None


def dataset_missing_message(cfg: TextDataConfig, split: str) -> str | None:
    """An actionable message when a purely local dataset split is absent (None when it is there or remote)."""
    if cfg.remote is not None or cfg.local is None:
        return None
    index = Path(cfg.local) / split / "index.json"
    if index.is_file():
        return None
    hint = cfg.create_hint or (
        "python scripts/data_prep/convert_dataset_hf.py --dataset <hf name or local files> "
        f"--splits {split} --out {cfg.local} --tokenizer <tokenizer.json> --concat_tokens <max_seq_len>"
    )
    return (
        f"dataset split {split!r} not found: {index} does not exist (data.local={cfg.local!r}, "
        f"data.remote=null). Create it with:\n  {hint}\n"
        "or point data.local at an existing MDS dataset, or set data.remote to where it is stored."
    )


def missing_data(cfg: TextDataConfig) -> str | None:
    """What is absent of the local-only data a run reads (train and eval splits, every stream), or None."""
    if not cfg.streams:
        for split in (cfg.train_split, cfg.eval_split):
            missing = split and dataset_missing_message(cfg, split)
            if missing:
                return missing
        return None
    lines = []
    for name, s in cfg.streams.items():
        local, remote = stream_location(s, local_root=cfg.local_root, remote_root=cfg.remote_root)
        for split in (s.split or cfg.train_split, s.eval_split):
            if (
                remote is None
                and local is not None
                and split
                and not (Path(local) / split / "index.json").is_file()
            ):
                lines.append(f"  data.streams.{name}: {Path(local) / split / 'index.json'} does not exist")
    if not lines:
        return None
    return "\n".join(
        [
            "stream data not found (data.remote_root is null, so every stream is read from data.local_root):",
            *lines,
            cfg.create_hint
            or "Set data.remote_root (or FOUNDRY_DATA_REMOTE) to where the streams are stored, point "
            "data.local_root at a copy, or write offline stand-ins: python scripts/data_prep/make_standin_mix.py "
            "--out <dir>, then data.local_root=<dir>",
        ]
    )


def build_text_dataloader(
    cfg: TextDataConfig,
    *,
    tokenizer: Any,  # a transformers tokenizer, or None for rows of token ids
    device_batch_size: int,
    world: World,
    max_seq_len: int,
    seed: int,
    split: str | None = None,
    evaluate: bool = False,
    shuffle: bool | None = None,
    drop_last: bool | None = None,
    vocab_size: int | None = None,
    documents: DocumentRule | None = None,
    device_type: str = "cpu",
) -> Any:  # foundry.data.loader.TextLoader (a streaming.StreamingDataLoader)
    """Builds the training or the eval loader: a `StreamingDataLoader` over a `StreamingDataset`.

    Args:
        cfg: The data config.
        tokenizer: Gives the pad id (eos when there is no pad token) and tokenizes `text` rows; None for
            datasets of token ids (pad id 0: padded positions are masked out of the loss anyway).
        device_batch_size: Samples per batch on this rank.
        world: This rank's place in the training world (built once by the task from its process group); the
            dataset partitions samples over it.
        max_seq_len: Row length.
        seed: Shuffle seed when `cfg.shuffle_seed` is null.
        split: The split (one dataset), or the default split of streams without one; null -> `cfg.train_split`
            (`cfg.eval_split` with `evaluate`).
        evaluate: The eval loader: unshuffled, every sample once (a partial last batch kept); a mixture reads
            the `eval_split` of each stream that has one, its samples tagged with their training stream index.
        shuffle: Overrides `cfg.shuffle` (training).
        drop_last: Drop a final partial batch (default: True for training, False for eval).
        vocab_size: The model's vocabulary size; token ids at or above it are a clear error.
        documents: How rows split into documents; set (when the model masks attention per document) -> batches
            carry `sequence_id` (B, S).
        device_type: The run's device type (`cuda`, `cpu`, ...): batches are pinned for `cuda` unless
            `cfg.pin_memory` says otherwise.

    Returns:
        A loader yielding dicts of (B, S) int64 tensors (and `_stream` tags with a mixture), with
        `state_dict()` / `load_state_dict()` (honouring `cfg.on_mixture_change`).

    Raises:
        FileNotFoundError: When a local-only split is absent, saying how to create it.
        ValueError: `evaluate` with no eval split (`cfg.eval_split` null, or no stream with an `eval_split`).
    """
    from foundry.data.loader import TextLoader  # the streaming loader stack is imported on use, not by config

    split = split or (cfg.eval_split if evaluate else cfg.train_split)
    missing = None if cfg.streams else dataset_missing_message(cfg, split) if split else None
    if missing is not None:
        raise FileNotFoundError(missing)
    pad = None
    if tokenizer is not None:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    # eval of a mixture reads only the streams with an eval split: tag samples with training stream indices
    mapping = eval_streams(cfg.streams)[1] if evaluate and cfg.streams else None
    collate = TextCollator(  # a SplitCollator: workers send narrow token ids, the loader makes the tensors
        max_seq_len=max_seq_len,
        pad_token_id=int(pad if pad is not None else 0),
        token_encoding_type=cfg.token_encoding_type,
        tokenizer=tokenizer,
        vocab_size=vocab_size,
        documents=documents,
        stream_map=None if mapping is None or mapping == list(range(len(mapping))) else mapping,
    )
    dataset = _dataset(
        cfg,
        split=split,
        evaluate=evaluate,
        batch_size=device_batch_size,
        world=world,
        seed=seed,
        shuffle=shuffle,
    )
    return TextLoader(
        dataset,
        batch_size=device_batch_size,
        collate_fn=collate,
        num_workers=cfg.num_workers,
        drop_last=(not evaluate) if drop_last is None else drop_last,
        persistent_workers=cfg.num_workers > 0,
        pin_memory=cfg.pin_memory if cfg.pin_memory is not None else device_type == "cuda",
        on_mixture_change=cfg.on_mixture_change,
    )


def _dataset(
    cfg: TextDataConfig,
    *,
    split: str | None,
    evaluate: bool,
    batch_size: int,
    world: World,
    seed: int,
    shuffle: bool | None,
) -> Any:  # streaming.StreamingDataset
    """The `StreamingDataset` of one loader: every knob from `cfg` (the epoch-shaping ones for training only)."""
    from streaming import StreamingDataset

    where: dict[str, Any] = {"local": cfg.local, "remote": cfg.remote, "split": split}
    if cfg.streams:
        streams = eval_streams(cfg.streams)[0] if evaluate else cfg.streams
        if not streams:
            raise ValueError("no stream has an eval_split: set data.streams.<name>.eval_split (e.g. val)")
        roots = {"local_root": cfg.local_root, "remote_root": cfg.remote_root}
        where = {
            "streams": build_streams(streams, split=split, eval_mode=evaluate, **roots),
            "stream_tag": STREAM_TAG,
        }
    elif split is None:
        raise ValueError("data.eval_split is null: there is no eval split to load")
    epoch: dict[str, Any] = {}
    if not evaluate:
        epoch = {
            "shuffle": cfg.shuffle if shuffle is None else shuffle,
            "shuffle_algo": cfg.shuffle_algo,
            "shuffle_seed": cfg.shuffle_seed if cfg.shuffle_seed is not None else seed,
            "shuffle_block_size": cfg.shuffle_block_size,
            "epoch_size": cfg.epoch_size,
            "sampling_method": cfg.sampling_method,
            "sampling_granularity": cfg.sampling_granularity,
            "batching_method": cfg.batching_method,
        }
    return StreamingDataset(
        **where,
        **epoch,
        batch_size=batch_size,
        num_canonical_nodes=cfg.num_canonical_nodes,
        partition_algo=cfg.partition_algo,
        predownload=cfg.predownload,
        cache_limit=cfg.cache_limit,
        download_retry=cfg.download_retry,
        download_timeout=cfg.download_timeout,
        download_budget=cfg.download_budget,
        validate_hash=cfg.validate_hash,
        keep_zip=cfg.keep_zip,
        allow_unsafe_types=cfg.allow_unsafe_types,
        replication=cfg.replication,
        world=world,
    )
