"""Pretraining batches from tokenized MDS text: `tokens` rows -> `input_ids` / `labels` (B, S) int64 tensors.

Design note: the dataset stays the generic `streaming.StreamingDataset` (raw sample dicts); all
text-specific work (dtype cast, truncation to `max_seq_len`, padding of short rows with `-100` labels,
tokenizing legacy `text` rows) happens in a picklable collate function. So there is no dataset subclass to
keep in step with the streaming library, and resumption is exactly `StreamingDataLoader.state_dict()`.
Unlike llm-foundry, packed rows keep their EOS labels even when pad == eos: only real padding is ignored.
Rows of token ids need no tokenizer (pad id 0; ids are checked against the model's vocabulary instead).
The config has two forms: one dataset (`local` / `remote`, e.g. `data=c4`) or a mixture of named streams
(`streams`, see `foundry.data.mixture`, e.g. `data=mpt-7b-mix`); both reach every `StreamingDataset` knob.
Its schema, `TextDataConfig`, is in `foundry.data.config` (checked at compose time, so a bad value names its
`data.<field>` before anything is built) and re-exported here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from foundry.data.collate import TextCollator
from foundry.data.config import MIXTURE_CHANGES, TextDataConfig
from foundry.data.documents import DocumentRule
from foundry.data.mixture import STREAM_TAG, build_streams, eval_streams, stream_location
from streaming.reader.world import World

__all__ = [
    "MIXTURE_CHANGES",
    "TextDataConfig",
    "build_text_dataloader",
    "dataset_missing_message",
    "missing_data",
]


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
            "data.local_root at a copy, or write offline stand-ins: "
            "python scripts/data_prep/make_standin_mix.py --out <dir>, then data.local_root=<dir>",
        ]
    )


def build_text_dataloader(
    cfg: TextDataConfig,
    *,
    tokenizer: Any,
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
) -> Any:
    """Builds the training or the eval loader: a `StreamingDataLoader` (`foundry.data.loader.TextLoader`)
    over a `StreamingDataset`.

    Args:
        cfg: The data config.
        tokenizer: A transformers tokenizer. Gives the pad id (eos when there is no pad token) and
            tokenizes `text` rows; None for datasets of token ids (pad id 0: padded positions are masked out
            of the loss anyway).
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
    # the streaming loader stack is imported on use, not by config
    from foundry.data.loader import TextLoader

    split = split or (cfg.eval_split if evaluate else cfg.train_split)
    missing = None if cfg.streams else dataset_missing_message(cfg, split) if split else None
    if missing is not None:
        raise FileNotFoundError(missing)
    pad = None
    if tokenizer is not None:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    # eval of a mixture reads only the streams with an eval split: tag samples with training stream indices
    mapping = eval_streams(cfg.streams)[1] if evaluate and cfg.streams else None
    # a SplitCollator: workers send narrow token ids, the loader makes the tensors
    collate = TextCollator(
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
) -> Any:
    """The `StreamingDataset` of one loader: every knob from `cfg`
    (the epoch-shaping ones for training only)."""
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
