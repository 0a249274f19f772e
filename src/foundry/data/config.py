"""The `data` config group's schemas: tokenized text in MDS (one dataset or a mixture of streams), the offline
quick start's corpus, and finetuning rows.

Design note: every option of `conf/data/` builds on one of these nodes: `TextDataConfig` (`data=c4`,
`data=local-mds`, mixtures such as `data=mpt-7b-mix`, whose `data.streams.<name>` entries are `StreamConfig`s
from `conf/data/streams/`), `QuickstartDataConfig` (`data=quickstart`), `FinetuneDataConfig`
(`data=finetune/<name>`) and `OfflineInstructDataConfig` (`data=finetune/instruct-cpu`). `TrainConfig.data` is
typed `Any` (OmegaConf 2.3 has no unions), so the composed node keeps the schema its option picked. Each is a
plain dataclass validated in `__post_init__`, so a bad value fails at compose time naming its `data.<field>`
before anything is built; the code that reads the data (`text.py`, `mixture.py`, `quickstart.py`,
`finetune/`) imports its schema from here. The text config reaches every `StreamingDataset` knob. The
finetuning config is llm-foundry's `train_loader.dataset` keys, flattened, with exactly one source: `hf_name`
(a file, a folder of `{split}.*` files, a saved HF dataset, or a hub name; read into memory) or MDS (`local`
and/or `remote`, streamed). `packing_ratio` is `Any`: a number >= 1, `auto`, or null (no packing).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streaming.format.hashing import check_validate_hash
from streaming.plan import BATCHING_METHODS, SHUFFLE_ALGOS
from streaming.util.sizes import parse_bytes, parse_count

if TYPE_CHECKING:
    from foundry.data.finetune.masks import TargetPolicy

__all__ = [
    "DEFAULT_CORPUS_MB",
    "DEFAULT_VOCAB_SIZE",
    "MIXTURE_CHANGES",
    "FinetuneDataConfig",
    "OfflineInstructDataConfig",
    "QuickstartDataConfig",
    "StreamConfig",
    "TextDataConfig",
    "check_streams",
]

_TOKEN_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
MIXTURE_CHANGES = ("error", "continue")
"""`data.on_mixture_change`: what a resumed run does when its streams or weights differ from the
checkpoint's."""
_CHOICES = {
    "sampling_method": ("balanced", "fixed"),
    "partition_algo": ("relaxed", "orig"),
    "batching_method": BATCHING_METHODS,
    "shuffle_algo": SHUFFLE_ALGOS,
    "on_mixture_change": MIXTURE_CHANGES,
    "token_encoding_type": _TOKEN_DTYPES,
}
DEFAULT_CORPUS_MB = 4.0
"""`data=quickstart`: characters of corpus, in millions."""
DEFAULT_VOCAB_SIZE = 512
"""`data=quickstart`: the BPE vocabulary size."""


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
            f"data.remote_root), or {key}.local / {key}.remote; streams come from "
            f"conf/data/streams/<source>.yaml (add one with +data/streams@{key}=<source>)"
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
    """Split used for evaluation (null: no eval); must be null with `streams`
    (each has its own eval_split)."""
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
    """On resume with other streams or weights than the checkpoint's:
    `error`, or `continue` from its position."""
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
        for name, low in (("num_workers", 0), ("download_retry", 0), ("predownload", 0),
                          ("sampling_granularity", 1), ("shuffle_seed", 0), ("shuffle_block_size", 1),
                          ("num_canonical_nodes", 1), ("replication", 1)):  # fmt: skip
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
                    f"data.{name}={getattr(self, name)!r} is for a single dataset, but data.streams is set: "
                    "use data.local_root / data.remote_root and per-stream fields "
                    f"(data.streams.<name>.{name}), or data.{name}=null"
                )
        check_streams(self.streams, local_root=self.local_root, remote_root=self.remote_root)
        if self.epoch_size is not None and any(s.proportion is None for s in self.streams.values()):
            raise ValueError(
                "data.epoch_size needs proportion weights on every stream (repeat/choose fix the size)"
            )

    @property
    def stream_names(self) -> list[str] | None:
        """The mixture's stream names in index order (the `_stream` tag of a sample indexes it);
        None: one dataset."""
        return list(self.streams) or None


@dataclass(kw_only=True)
class QuickstartDataConfig(TextDataConfig):
    """The `data=quickstart` option: a local corpus built (and cached) on first use."""

    corpus_mb: float = DEFAULT_CORPUS_MB
    """Characters of corpus to take, in millions."""
    vocab_size: int = DEFAULT_VOCAB_SIZE
    """BPE vocabulary size (the byte alphabet, the EOS token and merges)."""
    eval_fraction: float = 0.05
    """Share of documents (from the end) held out for the `val` split."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.local is None:
            raise ValueError("data.local must name the quick-start cache directory")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"data.eval_fraction={self.eval_fraction} must be in (0, 1)")
        if self.vocab_size < 258:
            raise ValueError(f"data.vocab_size={self.vocab_size} must be >= 258 (bytes + EOS + one merge)")


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
                "finetuning data needs exactly one source: data.hf_name (files, a saved or hub HF dataset) "
                "or data.local/data.remote (MDS)" + (", not both" if mds else "; both are null")
            )
        # a bad value fails naming its field
        _target_policy(self.target_prompts, self.target_responses)
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
        return _target_policy(self.target_prompts, self.target_responses)


def _target_policy(target_prompts: str, target_responses: str) -> TargetPolicy:
    # local: any import from `foundry.data.finetune` runs its __init__, which re-exports FinetuneDataConfig
    # from this module: a module-level import here would meet this module half-initialised
    from foundry.data.finetune.masks import TargetPolicy

    return TargetPolicy.parse(target_prompts, target_responses)


# `value`: whatever the YAML held
def _packing_ratio(value: Any) -> float | str | None:
    if value is None or value == "auto":
        return value
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        ratio = float("nan")
    if not ratio >= 1.0:
        raise ValueError(f"data.packing_ratio={value!r}: use a number >= 1, 'auto', or null (no packing)")
    return ratio


@dataclass(kw_only=True)
class OfflineInstructDataConfig(FinetuneDataConfig):
    """Finetuning data generated offline into `hf_name`
    (a local folder) when it has no `{train_split}.jsonl`."""

    chat: bool = False
    """Write chat `messages` rows instead of prompt/response."""
    additions: int = 300
    """Two-number addition questions added to the built-in and stdlib questions."""
    eval_fraction: float = 0.1
    """Share of questions (by hash) in the `val` split."""
    quickstart_local: str | None = None
    """A quick-start cache folder: its default tokenizer is built there when missing
    (the quick-start model's)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hf_name is None or "://" in self.hf_name:
            raise ValueError(
                f"data.hf_name={self.hf_name!r}: the offline instruction set needs a local folder"
            )
        if self.train_split != "train" or self.eval_split not in (None, "val"):
            raise ValueError(
                "the offline instruction set has splits `train` and `val` (data.train_split/eval_split)"
            )
        if self.additions < 0:
            raise ValueError(f"data.additions={self.additions} must be >= 0")
