"""`build_finetune_dataloader`: a `FinetuneDataConfig` + runtime objects -> a resumable `FinetuneLoader`.

Design note: mirrors `foundry.data.text.build_text_dataloader` (same keyword arguments, `World` for the
rank's place). `packing_ratio: auto` is decided from the same sample on every rank (the first examples of the
epoch-0 order for in-memory data, the first stored rows for MDS), so ranks agree without a collective.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from foundry.data.config import FinetuneDataConfig
from foundry.data.finetune.collate import Packer
from foundry.data.finetune.examples import ExampleError
from foundry.data.finetune.loader import FinetuneLoader, MemoryExamples, StreamedExamples
from foundry.data.finetune.masks import Example
from foundry.data.finetune.packing import candidate_ratios, choose_packing_ratio
from foundry.data.finetune.preprocess import resolve_preprocessing_fn
from foundry.data.finetune.sources import load_rows
from foundry.data.finetune.tokenize import ExampleBuilder
from streaming.reader.world import World

__all__ = ["build_examples", "build_finetune_dataloader", "resolve_packing_ratio"]

log = logging.getLogger(__name__)


def build_examples(rows: Sequence[Any], builder: ExampleBuilder) -> tuple[list[Example], int]:
    """Validates and tokenizes every row (errors name the row index);
    returns (kept examples, dropped count)."""
    kept: list[Example] = []
    for i, row in enumerate(rows):
        ex = builder(row, i)
        if ex is not None:
            kept.append(ex)
    return kept, len(rows) - len(kept)


def resolve_packing_ratio(
    cfg: FinetuneDataConfig, sample: Sequence[Example], *, device_batch_size: int, max_seq_len: int
) -> float | None:
    """The configured ratio, or for `auto` the one `choose_packing_ratio` picks on `sample`."""
    if cfg.packing_ratio != "auto":
        return cfg.packing_ratio
    ratio = choose_packing_ratio(
        [len(ex) for ex in sample],
        device_batch_size=device_batch_size,
        max_len=max_seq_len,
        max_leftover_bins=cfg.max_leftover_bins_to_keep,
        max_waste=cfg.auto_packing_max_waste,
    )
    log.info("finetuning data: packing_ratio auto -> %.1f (profiled on %d examples)", ratio, len(sample))
    return ratio


def _profile_size(cfg: FinetuneDataConfig, *, device_batch_size: int, max_seq_len: int) -> int:
    if cfg.auto_packing_samples is not None:
        return cfg.auto_packing_samples
    top = max(candidate_ratios(max_len=max_seq_len, device_batch_size=device_batch_size))
    return int(top * device_batch_size) * 100


def build_finetune_dataloader(
    cfg: FinetuneDataConfig,
    *,
    tokenizer: Any,
    device_batch_size: int,
    world: World,
    split: str,
    max_seq_len: int,
    seed: int,
    shuffle: bool | None = None,
    drop_last: bool = True,
) -> FinetuneLoader:
    """Builds the loader of one split.

    Args:
        cfg: The data config.
        tokenizer: A transformers tokenizer. Tokenizes raw rows; gives the EOS id (appended to final
            responses) and the pad id (eos when there is no pad token).
        device_batch_size: Rows per batch on this rank (B).
        world: This rank's place in the training world.
        split: Which split.
        max_seq_len: Row length (S).
        seed: Shuffle seed when `cfg.shuffle_seed` is null.
        shuffle: Overrides `cfg.shuffle` (eval passes False).
        drop_last: Drop a final partial batch (always, when packing: a step needs B examples).

    Returns:
        A `FinetuneLoader` yielding `input_ids`, `labels`, `attention_mask` (+ `sequence_id` when packing),
        each (B, S) int64, with `state_dict()` / `load_state_dict()`.

    Raises:
        ExampleError: A row is not a valid prompt/response or chat example (names the row and the problem).
    """
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    builder = ExampleBuilder(
        tokenizer=tokenizer,
        policy=cfg.policy,
        max_seq_len=max_seq_len,
        preprocess=resolve_preprocessing_fn(cfg.preprocessing_fn, dataset=cfg.hf_name),
    )
    shuffle = cfg.shuffle if shuffle is None else shuffle
    seed = cfg.shuffle_seed if cfg.shuffle_seed is not None else seed
    n_profile = _profile_size(cfg, device_batch_size=device_batch_size, max_seq_len=max_seq_len)
    source: MemoryExamples | StreamedExamples
    dropped = 0
    if cfg.hf_name is not None:
        examples, dropped = build_examples(
            load_rows(cfg.hf_name, split=split, hf_kwargs=cfg.hf_kwargs), builder
        )
        log.info("finetuning data %s/%s: %d examples, %d dropped (no loss token within max_seq_len=%d)",
                 cfg.hf_name, split, len(examples), dropped, max_seq_len)  # fmt: skip
        if not examples:
            raise ExampleError(
                None, f"split {split!r} of {cfg.hf_name!r} has no usable example ({dropped} dropped)"
            )
        probe = MemoryExamples(
            examples, step=1, min_step=1, group=0, num_groups=1, seed=seed, shuffle=shuffle
        )
        sample = [examples[i] for i in probe.shard(0)[:n_profile]]
        ratio = resolve_packing_ratio(
            cfg, sample, device_batch_size=device_batch_size, max_seq_len=max_seq_len
        )
        step = int(device_batch_size * ratio) if ratio is not None else device_batch_size
        source = MemoryExamples(
            examples,
            step=step,
            min_step=device_batch_size if (drop_last or ratio is not None) else 1,
            group=world.rank // world.replication,
            num_groups=world.num_ranks // world.replication,
            seed=seed,
            shuffle=shuffle,
        )
    else:
        source, ratio = _streamed(cfg, builder, world=world, split=split, seed=seed, shuffle=shuffle,
                                  device_batch_size=device_batch_size, max_seq_len=max_seq_len,
                                  n_profile=n_profile, drop_last=drop_last)  # fmt: skip
    packer = None
    if ratio is not None:
        packer = Packer(
            num_rows=device_batch_size,
            max_seq_len=max_seq_len,
            pad_token_id=int(pad),
            max_leftover_bins=cfg.max_leftover_bins_to_keep,
        )
    return FinetuneLoader(
        source,
        max_seq_len=max_seq_len,
        pad_token_id=int(pad),
        packer=packer,
        packing_ratio=ratio,
        dropped_examples=dropped,
    )


def _streamed(
    cfg: FinetuneDataConfig,
    builder: ExampleBuilder,
    *,
    world: World,
    split: str,
    seed: int,
    shuffle: bool,
    device_batch_size: int,
    max_seq_len: int,
    n_profile: int,
    drop_last: bool,
) -> tuple[StreamedExamples, float | None]:
    # keeps `import foundry.data.finetune` light
    from streaming import StreamingDataLoader, StreamingDataset

    def dataset(batch_size: int) -> StreamingDataset:
        return StreamingDataset(
            remote=cfg.remote,
            local=cfg.local,
            split=split,
            batch_size=batch_size,
            shuffle=shuffle,
            shuffle_seed=seed,
            num_canonical_nodes=cfg.num_canonical_nodes,
            world=world,
        )

    ratio = cfg.packing_ratio
    if ratio == "auto":
        ds = dataset(device_batch_size)
        sample, _ = build_examples([ds[i] for i in range(min(n_profile, ds.size))], builder)
        ratio = resolve_packing_ratio(
            cfg, sample, device_batch_size=device_batch_size, max_seq_len=max_seq_len
        )
    step = int(device_batch_size * ratio) if ratio is not None else device_batch_size
    loader = StreamingDataLoader(
        dataset(step),
        batch_size=step,
        collate_fn=StreamedExamples.collate_fn(builder),
        num_workers=cfg.num_workers,
        drop_last=drop_last or ratio is not None,
        persistent_workers=cfg.num_workers > 0,
    )
    fill = drop_last or ratio is not None
    min_step = device_batch_size if fill else 1
    return StreamedExamples(loader, step=step, min_step=min_step, fill=fill), ratio
