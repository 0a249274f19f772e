"""`task=finetune`: the pretraining run (plan -> build -> `Trainer.fit`) on prompt/response or chat rows.

Design note: finetuning differs from pretraining in three places only, so it reuses `pretrain` whole and
passes its own data step (`build_finetune_data`) plus a config with two rules applied (`finetune_config`):
- `checkpoint.load_path` loads the model weights only (llm-foundry's finetuning YAMLs set
  `load_weights_only: true`): a pretraining checkpoint's step, optimizer and text-loader position mean
  nothing to a finetuning run. Continuing a finetuning run is autoresume's job (same `save_folder`). A run
  with no starting point (no `load_path`, no pretrained `hf-causal-lm` weights) is refused unless
  `from_scratch=true` says random weights are meant (llm-foundry only warns).
- Packed rows (`data.packing_ratio` set) carry `sequence_id`, and the model is switched to mask attention by
  it (MPT `model.attn_config.attn_uses_sequence_id`, `hf-causal-lm` `model.attn_uses_sequence_id`), so
  attention never crosses examples; a model that cannot (flash attention for `hf-causal-lm`) fails here
  naming the fields. Padded rows have no `sequence_id`, so asking for the masking without packing is refused.
- The eval split is always read padded (one example per row, every example once, none carried between
  passes): an example's loss is the same packed or alone, so eval loss does not depend on packing, and
  each eval pass restarts from the split's beginning even when `trainer.eval_subset_num_batches` stops it.
The training loader's state (position in the epoch plus the packer's leftover bins) is checkpointed by the
trainer like any loader's, so a resumed run sees the batches an uninterrupted one would have. Leftover bins
differ per rank while a full checkpoint holds rank 0's run state, so `RankStates` gathers every rank's
loader state into it (each rank loads its own; resuming on another number of ranks is refused).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from foundry.config import TrainConfig
from foundry.data.config import OfflineInstructDataConfig
from foundry.data.finetune import FinetuneDataConfig, FinetuneLoader, build_finetune_dataloader
from foundry.data.finetune.offline import prepare_offline_instruct
from foundry.errors import ConfigError
from foundry.models import ModelConfig
from foundry.models.config import HFCausalLMConfig, MPTModelConfig
from foundry.parallel.dist import barrier, rank, world_size
from foundry.rundir.record import RunRecord
from foundry.tasks.plan import batch_plan, resolve_max_seq_len
from foundry.tasks.pretrain import RunData, pretrain
from foundry.tokenizers import build_tokenizer
from streaming.reader.world import World

__all__ = [
    "EvalPasses",
    "RankStates",
    "build_finetune_data",
    "finetune",
    "finetune_config",
    "with_sequence_ids",
]

log = logging.getLogger(__name__)


def finetune(cfg: TrainConfig, *, run_dir: str | Path, record: RunRecord | None = None) -> dict[str, float]:
    """Finetunes `cfg.model` on `cfg.data` (a `FinetuneDataConfig`); one process or every rank of `torchrun`.

    `record` is opened once the run is accepted (see `pretrain`).

    Returns:
        The final metrics (`train/loss`, `eval/loss` over the eval split's loss tokens, ...).

    Raises:
        ConfigError: The data is not finetuning data, or the model cannot keep packed examples apart.
    """
    return pretrain(finetune_config(cfg), run_dir=run_dir, data_builder=build_finetune_data, record=record)


def _finetune_data(cfg: TrainConfig) -> FinetuneDataConfig:
    if not isinstance(cfg.data, FinetuneDataConfig):
        raise ConfigError(
            f"task=finetune needs finetuning data (data=finetune/<name>), not {type(cfg.data).__name__}"
        )
    return cfg.data


def finetune_config(cfg: TrainConfig) -> TrainConfig:
    """`cfg` with the finetuning rules (module docstring): `load_path` weights only, document masking on
    when packing.

    Raises:
        ConfigError: Non-finetuning data; masking by sequence id without packing; a model that cannot mask.
    """
    data = _finetune_data(cfg)
    model = cfg.model
    if data.packing_ratio is not None and not model.uses_sequence_id():
        model = with_sequence_ids(model)
        log.info("task=finetune: data.packing_ratio=%s packs examples; the model masks attention by "
                 "sequence id so they never attend to each other", data.packing_ratio)  # fmt: skip
    elif data.packing_ratio is None and model.uses_sequence_id():
        raise ConfigError(
            f"{_masking_field(model)}=true needs packed rows (they carry sequence_id), but "
            "data.packing_ratio is null (padded rows): "
            "set data.packing_ratio (a number >= 1 or auto), or the field to false"
        )
    ckpt = cfg.checkpoint
    if ckpt.load_path and not ckpt.load_weights_only:
        ckpt = replace(ckpt, load_weights_only=True)
    _check_starting_point(cfg)
    return replace(cfg, model=model, checkpoint=ckpt)


def _check_starting_point(cfg: TrainConfig) -> None:
    """Finetuning random weights is almost always a forgotten `checkpoint.load_path`:
    refused unless asked for."""
    model = cfg.model
    if cfg.checkpoint.load_path or (isinstance(model, HFCausalLMConfig) and model.pretrained):
        return
    if cfg.from_scratch:
        log.warning("task=finetune from_scratch=true: the model starts from random weights (no "
                    "checkpoint.load_path)")  # fmt: skip
        return
    hf = (
        "model.pretrained=true (weights from model.pretrained_model_name_or_path), "
        if isinstance(model, HFCausalLMConfig)
        else ""
    )
    raise ConfigError(
        "task=finetune has no starting point: the model would finetune random weights. Set "
        "checkpoint.load_path=<pretrained checkpoint> (e.g. outputs/quickstart/checkpoints after `make "
        f"train`), {hf}or add from_scratch=true to finetune randomly initialised weights on purpose"
    )


def _masking_field(model: ModelConfig) -> str:
    if isinstance(model, MPTModelConfig):
        return "model.attn_config.attn_uses_sequence_id"
    return "model.attn_uses_sequence_id"


def with_sequence_ids(model: ModelConfig) -> ModelConfig:
    """`model` masking attention by `sequence_id` (packed examples kept apart).

    Raises:
        ConfigError: The model type has no such option, or its attention backend cannot take the mask.
    """
    if isinstance(model, MPTModelConfig):
        return replace(model, attn_config=replace(model.attn_config, attn_uses_sequence_id=True))
    if isinstance(model, HFCausalLMConfig):
        try:
            return replace(model, attn_uses_sequence_id=True)
        except ValueError as err:
            raise ConfigError(
                f"data.packing_ratio packs several examples per row, which needs the model to mask attention "
                f"by sequence id: {err}; or set data.packing_ratio=null (padded rows)"
            ) from err
    raise ConfigError(
        f"data.packing_ratio: {type(model).__name__} cannot mask attention by sequence id, so packed "
        "examples would attend to each other; set data.packing_ratio=null (padded rows)"
    )


def build_finetune_data(cfg: TrainConfig, *, world: World, is_main: bool) -> RunData:
    """The tokenizer, the training loader (padded or packed) and the padded eval loader of `cfg.data`.

    Raises:
        ConfigError: No tokenizer configured, or one with more tokens than `model.vocab_size`.
        ExampleError: A row is not a valid example (names the row and the problem).
    """
    data = _finetune_data(cfg)
    max_seq_len = resolve_max_seq_len(cfg)
    batches = batch_plan(cfg, world)
    if isinstance(data, OfflineInstructDataConfig):
        if not is_main:
            # rank 0 writes the set (and the quick-start tokenizer) first; the others then read it
            barrier()
        prepare_offline_instruct(data)
        if is_main:
            barrier()
    tokenizer = _tokenizer(cfg)
    train = RankStates(
        build_finetune_dataloader(
            data,
            tokenizer=tokenizer,
            device_batch_size=batches.device_batch_size,
            world=world,
            split=data.train_split,
            max_seq_len=max_seq_len,
            seed=cfg.seed,
        )
    )
    eval_loader = None
    if data.eval_split:
        padded = replace(data, packing_ratio=None, max_leftover_bins_to_keep=None)
        eval_loader = EvalPasses(
            build_finetune_dataloader(
                padded,
                tokenizer=tokenizer,
                device_batch_size=cfg.trainer.device_eval_batch_size or batches.microbatch_size,
                world=world,
                split=data.eval_split,
                max_seq_len=max_seq_len,
                seed=cfg.seed,
                shuffle=False,
                drop_last=False,
            )
        )
    if is_main:
        print(_describe(train.loader, max_seq_len=max_seq_len), flush=True)
    return RunData(tokenizer=tokenizer, train=train, eval=eval_loader)


# returns a transformers tokenizer
def _tokenizer(cfg: TrainConfig) -> Any:
    if cfg.tokenizer.name is None:
        raise ConfigError(
            "task=finetune tokenizes prompt/response or chat rows: set tokenizer.name (tokenizer=none is for "
            "rows of token ids)"
        )
    tokenizer = build_tokenizer(cfg.tokenizer)
    vocab = getattr(cfg.model, "vocab_size", None)
    if vocab is not None and len(tokenizer) > vocab:
        raise ConfigError(
            f"tokenizer.name={cfg.tokenizer.name!r} has {len(tokenizer)} tokens but "
            f"model.vocab_size={vocab}: its ids would index past the embedding; use the tokenizer the model "
            "was trained with, or raise model.vocab_size"
        )
    return tokenizer


def _describe(train: FinetuneLoader, *, max_seq_len: int) -> str:
    ratio = train.packing_ratio
    rows = f"packed, packing_ratio {ratio:g}" if ratio is not None else "padded, one example per row"
    return (
        f"[foundry] finetuning data: {len(train)} batches per epoch of {max_seq_len}-token rows ({rows}); "
        f"{train.dropped_examples} example(s) dropped (no loss token within max_seq_len)"
    )


class EvalPasses:
    """An eval loader whose every `iter()` starts at the split's beginning (even after a pass was cut short).

    Args:
        loader: A `FinetuneLoader` (any iterable with `state_dict` / `load_state_dict`).
    """

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self._start = loader.state_dict()

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        self.loader.load_state_dict(self._start)
        return iter(self.loader)


class RankStates:
    """A training loader whose `state_dict` holds every rank's state (a collective: every rank calls it).

    Args:
        loader: A `FinetuneLoader`.
    """

    def __init__(self, loader: FinetuneLoader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return iter(self.loader)

    def state_dict(self) -> dict[str, Any]:
        mine = self.loader.state_dict()
        states: list[Any] = [mine]
        if world_size() > 1:
            states = [None] * world_size()
            dist.all_gather_object(states, mine)
        return {"ranks": states}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ranks = state.get("ranks")
        if ranks is None:
            raise ValueError(
                "the checkpoint's data state is not a finetuning loader's: resume it with its own task"
            )
        if len(ranks) != world_size():
            raise ValueError(
                f"the checkpoint was saved by {len(ranks)} rank(s) and this run has {world_size()}: packed "
                "finetuning data keeps leftover bins per rank, so resume on the same number of ranks (or "
                "start from its weights: checkpoint.load_path=<checkpoint> with a new save_folder)"
            )
        self.loader.load_state_dict(ranks[rank()])
