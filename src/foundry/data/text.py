"""Pretraining batches from tokenized MDS text: `tokens` rows -> `input_ids` / `labels` (B, S) int64 tensors.

Design note: the dataset stays the generic `streaming.StreamingDataset` (raw sample dicts); all
text-specific work (dtype cast, truncation to `max_seq_len`, padding of short rows with `-100` labels,
tokenizing legacy `text` rows) happens in a picklable collate function. So there is no dataset subclass to
keep in step with the streaming library, and resumption is exactly `StreamingDataLoader.state_dict()`.
Unlike llm-foundry, packed rows keep their EOS labels even when pad == eos: only real padding is ignored.
Rows of token ids need no tokenizer (pad id 0; ids are checked against the model's vocabulary instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundry.data.collate import TextCollator
from streaming.world import World

__all__ = ["TextDataConfig", "build_text_dataloader", "dataset_missing_message"]

_TOKEN_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


@dataclass(kw_only=True)
class TextDataConfig:
    """A tokenized text dataset in MDS (the `data` group): where it is and how to read it."""

    local: str | None = None
    """Local directory (the cache when `remote` is set; the dataset itself otherwise)."""
    remote: str | None = None
    """Remote URL of the dataset (any scheme the streaming storage layer supports), or null."""
    train_split: str = "train"
    """Split sub-directory used for training."""
    eval_split: str | None = "val"
    """Split sub-directory used for evaluation (null: no eval)."""
    max_seq_len: int | None = None
    """Row length; null -> `model.max_seq_len`."""
    shuffle: bool = True
    """Shuffle training samples (eval is never shuffled)."""
    shuffle_algo: str = "py1e"
    """Streaming shuffle algorithm: naive, py1s, py2s, py1br, py1e."""
    shuffle_seed: int | None = None
    """Shuffle seed; null -> the run's `seed`."""
    num_canonical_nodes: int | None = None
    """Streaming's canonical nodes (fix it to keep the sample order when the world size changes)."""
    num_workers: int = 0
    """DataLoader worker processes per rank."""
    token_encoding_type: str = "int64"
    """dtype of legacy `tokens` columns stored as raw `bytes` (ndarray columns carry their own dtype)."""
    create_hint: str = ""
    """What to run when the dataset is absent (shown in the error)."""

    def __post_init__(self) -> None:
        if self.local is None and self.remote is None:
            raise ValueError("data.local and data.remote are both null: set at least one")
        if self.token_encoding_type not in _TOKEN_DTYPES:
            raise ValueError(
                f"data.token_encoding_type={self.token_encoding_type!r}: use one of {_TOKEN_DTYPES}"
            )
        if self.num_workers < 0:
            raise ValueError(f"data.num_workers={self.num_workers} must be >= 0")


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


def build_text_dataloader(
    cfg: TextDataConfig,
    *,
    tokenizer: Any,  # noqa: ANN401 - a transformers tokenizer, or None for rows of token ids
    device_batch_size: int,
    world: World,
    split: str,
    max_seq_len: int,
    seed: int,
    shuffle: bool | None = None,
    drop_last: bool = True,
    vocab_size: int | None = None,
) -> Any:  # noqa: ANN401 - streaming.StreamingDataLoader
    """Builds the loader of one split: a `StreamingDataLoader` over a `StreamingDataset`.

    Args:
        cfg: The data config.
        tokenizer: Gives the pad id (eos when there is no pad token) and tokenizes `text` rows; None for
            datasets of token ids (pad id 0: padded positions are masked out of the loss anyway).
        device_batch_size: Samples per batch on this rank.
        world: This rank's place in the training world (built once by the task from its process group); the
            dataset partitions samples over it.
        split: Which split.
        max_seq_len: Row length.
        seed: Shuffle seed when `cfg.shuffle_seed` is null.
        shuffle: Overrides `cfg.shuffle` (eval passes False).
        drop_last: Drop a final partial batch (training: every step sees a full batch).
        vocab_size: The model's vocabulary size; token ids at or above it are a clear error.

    Returns:
        A loader yielding dicts of (B, S) int64 tensors, with `state_dict()` / `load_state_dict()`.

    Raises:
        FileNotFoundError: When a local-only split is absent, saying how to create it.
    """
    from streaming import StreamingDataLoader, StreamingDataset

    missing = dataset_missing_message(cfg, split)
    if missing is not None:
        raise FileNotFoundError(missing)
    pad = None
    if tokenizer is not None:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    collate = TextCollator(
        max_seq_len=max_seq_len,
        pad_token_id=int(pad if pad is not None else 0),
        token_encoding_type=cfg.token_encoding_type,
        tokenizer=tokenizer,
        vocab_size=vocab_size,
    )
    dataset = StreamingDataset(
        remote=cfg.remote,
        local=cfg.local,
        split=split,
        batch_size=device_batch_size,
        shuffle=cfg.shuffle if shuffle is None else shuffle,
        shuffle_algo=cfg.shuffle_algo,
        shuffle_seed=cfg.shuffle_seed if cfg.shuffle_seed is not None else seed,
        num_canonical_nodes=cfg.num_canonical_nodes,
        world=world,
    )
    return StreamingDataLoader(
        dataset,
        batch_size=device_batch_size,
        collate_fn=collate,
        num_workers=cfg.num_workers,
        drop_last=drop_last,
        persistent_workers=cfg.num_workers > 0,
    )
