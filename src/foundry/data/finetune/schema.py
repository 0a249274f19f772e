"""The `data=finetune/<name>` schema: where instruction/chat data is and how examples become rows.

Design note: one typed dataclass (llm-foundry's `train_loader.dataset` keys, flattened), validated in
`__post_init__` so a bad value fails at compose time naming the field. Exactly one source: `hf_name` (a
file, a folder of `{split}.*` files, a saved HF dataset, or a hub name; read into memory) or MDS
(`local` and/or `remote`, streamed). `packing_ratio` is `Any` because OmegaConf 2.3 has no unions: a
number >= 1, `auto`, or null (no packing: rows padded to `max_seq_len`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from foundry.data.finetune.masks import TargetPolicy

__all__ = ["FinetuneDataConfig"]


@dataclass(kw_only=True)
class FinetuneDataConfig:
    """Finetuning data (prompt/response or chat rows) for `task=finetune`."""

    hf_name: str | None = None
    """A .jsonl/.json/.csv/.parquet file, a folder (local or store URL) of `{split}.*` files or `{split}/`
    folders, a folder saved with `save_to_disk`, or an HF hub name (offline: must be cached)."""
    hf_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra `datasets.load_dataset` arguments (e.g. `name: en`)."""
    preprocessing_fn: str | None = None
    """Maps rows to prompt/response or chat: a registered name (alpaca, dolly) or `module.path:function`."""
    local: str | None = None
    """MDS: local directory (the cache when `remote` is set)."""
    remote: str | None = None
    """MDS: remote URL (any store the streaming layer supports)."""
    train_split: str = "train"
    """Split used for training."""
    eval_split: str | None = None
    """Split used for evaluation (null: none)."""
    max_seq_len: int | None = None
    """Row length; null -> `model.max_seq_len`."""
    target_prompts: str = "none"
    """Prompt tokens that generate loss: none | all | length>=N."""
    target_responses: str = "last"
    """Response tokens that generate loss: last (final answer only) | all."""
    packing_ratio: Any = None
    """Examples read per row when packing (a number >= 1, or `auto`); null: no packing (padded rows)."""
    max_leftover_bins_to_keep: int | None = None
    """Packing: partly filled rows carried to the next step (null: all)."""
    auto_packing_max_waste: float = 0.0
    """`auto`: the largest profiled ratio whose wasted share of tokens stays at or below this."""
    auto_packing_samples: int | None = None
    """`auto`: examples profiled (null: 100 times the largest raw batch, as llm-foundry)."""
    shuffle: bool = True
    """Shuffle training examples (eval is never shuffled)."""
    shuffle_seed: int | None = None
    """Shuffle seed; null -> the run's `seed`."""
    num_canonical_nodes: int | None = None
    """MDS: streaming's canonical nodes."""
    num_workers: int = 0
    """MDS: DataLoader worker processes per rank."""

    def __post_init__(self) -> None:
        mds = self.local is not None or self.remote is not None
        if (self.hf_name is not None) == mds:
            raise ValueError(
                "finetuning data needs exactly one source: data.hf_name (files, a saved or hub HF dataset) or "
                "data.local/data.remote (MDS)" + (", not both" if mds else "; both are null")
            )
        TargetPolicy.parse(self.target_prompts, self.target_responses)
        self.packing_ratio = _packing_ratio(self.packing_ratio)
        if self.max_leftover_bins_to_keep is not None and self.max_leftover_bins_to_keep < 0:
            raise ValueError(
                f"data.max_leftover_bins_to_keep={self.max_leftover_bins_to_keep} must be >= 0 or null"
            )
        if self.max_leftover_bins_to_keep is not None and self.packing_ratio is None:
            raise ValueError(
                "data.max_leftover_bins_to_keep is set but data.packing_ratio is null (no packing)"
            )
        if not 0.0 <= self.auto_packing_max_waste < 1.0:
            raise ValueError(f"data.auto_packing_max_waste={self.auto_packing_max_waste} must be in [0, 1)")
        if self.num_workers < 0:
            raise ValueError(f"data.num_workers={self.num_workers} must be >= 0")

    @property
    def policy(self) -> TargetPolicy:
        return TargetPolicy.parse(self.target_prompts, self.target_responses)


def _packing_ratio(value: Any) -> float | str | None:  # whatever the YAML held
    if value is None or value == "auto":
        return value
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        ratio = float("nan")
    if not ratio >= 1.0:
        raise ValueError(f"data.packing_ratio={value!r}: use a number >= 1, 'auto', or null (no packing)")
    return ratio
