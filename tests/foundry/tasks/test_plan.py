"""`plan_run`: the derived numbers of a run from its composed config and world alone (nothing is built)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from foundry.config import TrainConfig, register_configs, to_train_config
from foundry.errors import ConfigError
from foundry.precision import resolve_precision
from foundry.tasks.plan import RunPlan, plan_run, resolve_max_seq_len
from streaming.reader.world import World

CONF = Path(__file__).resolve().parents[3] / "conf"
RUN_JSON_DERIVED = {
    "device_batch_size", "microbatch_size", "microbatches_per_step", "tokens_per_step", "max_steps",
    "steps_per_epoch", "total_tokens", "eval_interval_steps", "n_params", "world_size", "parallelism", "precision",
}  # fmt: skip


def _cfg(*overrides: str) -> TrainConfig:
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return to_train_config(compose("train", overrides=list(overrides)))


def _world(ranks: int, *, per_node: int | None = None, rank: int = 0) -> World:
    per_node = per_node or ranks
    return World(num_nodes=ranks // per_node, ranks_per_node=per_node, rank=rank)


def _plan(cfg: TrainConfig, ranks: int = 1, *, batches_per_epoch: int = 100, device: str = "cpu") -> RunPlan:
    precision = resolve_precision(cfg.trainer.precision, device=torch.device(device))  # as the task does
    return plan_run(cfg, _world(ranks), batches_per_epoch=batches_per_epoch, precision=precision)


def test_smoke_cpu_plan_matches_what_its_run_json_records():
    plan = _plan(_cfg("experiment=smoke-cpu"))  # mpt-tiny (128 tokens), 4 per step in microbatches of 2, 5ba
    assert (plan.max_seq_len, plan.tokens_per_step, plan.max_steps) == (128, 4 * 128, 5)
    assert (plan.batches.device_batch_size, plan.batches.microbatch_size, plan.batches.grad_accum) == (
        4,
        2,
        2,
    )
    assert (plan.eval_interval_steps, plan.eval_batch_size, plan.precision) == (0, 2, "fp32")
    assert plan.save_interval_steps == 5  # checkpoint=final: 1dur
    derived = plan.derived(n_params=123)
    assert set(derived) == RUN_JSON_DERIVED
    assert (
        derived["total_tokens"] == 5 * 4 * 128 and derived["n_params"] == 123 and derived["world_size"] == 1
    )


@pytest.mark.parametrize(
    ("ranks", "microbatch", "device_batch", "micro", "accum"),
    [(1, "auto", 16, 16, 1), (2, "auto", 8, 8, 1), (4, "auto", 4, 4, 1), (1, "3", 16, 3, 6), (2, "3", 8, 3, 3),
     (4, "3", 4, 3, 2), (4, "8", 4, 4, 1)],
)  # fmt: skip
def test_the_global_batch_splits_over_ranks_and_microbatches(ranks, microbatch, device_batch, micro, accum):
    cfg = _cfg("trainer.global_train_batch_size=16", f"trainer.device_train_microbatch_size={microbatch}")
    plan = _plan(cfg, ranks)
    assert (plan.batches.device_batch_size, plan.batches.microbatch_size, plan.batches.grad_accum) == (
        device_batch,
        micro,
        accum,
    )
    assert plan.batches.auto_microbatch == (microbatch == "auto")
    assert plan.tokens_per_step == 16 * plan.max_seq_len  # the global batch, whatever the world size
    assert plan.world_size == ranks and plan.derived(n_params=0)["world_size"] == ranks


def test_world_size_counts_every_node():
    cfg = _cfg("trainer.global_train_batch_size=16")
    plan = plan_run(cfg, _world(4, per_node=2, rank=3), batches_per_epoch=10, precision="fp32")
    assert plan.world_size == 4 and plan.batches.device_batch_size == 4


def test_a_global_batch_that_does_not_divide_over_the_ranks_names_the_field():
    cfg = _cfg("trainer.global_train_batch_size=6")
    with pytest.raises(
        ConfigError, match=r"trainer.global_train_batch_size=6 is not divisible by the world size 4"
    ):
        _plan(cfg, 4)


def test_data_longer_than_the_model_is_a_config_error_naming_both_fields():
    cfg = _cfg("experiment=smoke-cpu", "data.max_seq_len=256")  # mpt-tiny: model.max_seq_len=128
    with pytest.raises(ConfigError, match=r"data.max_seq_len=256 .* model.max_seq_len=128"):
        _plan(cfg)
    with pytest.raises(ConfigError, match="model.max_seq_len"):
        resolve_max_seq_len(cfg)  # the rule task=eval uses too


def test_max_seq_len_is_the_datas_else_the_models():
    assert resolve_max_seq_len(_cfg("model=mpt-tiny")) == 128
    cfg = _cfg("model=mpt-tiny", "data.max_seq_len=64", "trainer.global_train_batch_size=4")
    plan = _plan(cfg)
    assert plan.max_seq_len == 64 and plan.tokens_per_step == 4 * 64
    assert resolve_max_seq_len(_cfg("model=hf-causal-lm", "data.max_seq_len=512")) == 512


def test_a_model_without_max_seq_len_needs_data_max_seq_len():
    cfg = _cfg("model=hf-causal-lm")
    with pytest.raises(ConfigError, match=r"set data.max_seq_len"):
        _plan(cfg)


@pytest.mark.parametrize(
    ("duration", "batches_per_epoch", "subset", "steps"),
    [("3ba", 100, -1, 3), ("1000tok", 100, -1, 2), ("1024tok", 100, -1, 2), ("1025tok", 100, -1, 3),
     ("9sp", 100, -1, 3), ("1ep", 7, -1, 7), ("2ep", 7, -1, 14), ("1ep", 7, 3, 3), ("0ba", 7, -1, 0)],
)  # fmt: skip
def test_short_runs_round_up_to_whole_steps(duration, batches_per_epoch, subset, steps):
    cfg = _cfg(
        "experiment=smoke-cpu",  # 4 rows of 128 tokens per step
        f"trainer.max_duration={duration}",
        f"trainer.train_subset_num_batches={subset}",
    )
    plan = _plan(cfg, batches_per_epoch=batches_per_epoch)
    assert plan.max_steps == steps
    assert plan.steps_per_epoch == (batches_per_epoch if subset < 0 else min(subset, batches_per_epoch))
    assert plan.total_tokens == steps * 512


def test_intervals_are_in_steps():
    cfg = _cfg(
        "experiment=smoke-cpu",
        "trainer.max_duration=10ba",
        "trainer.eval_interval=0.5dur",
        "trainer.log_interval=3",
        "checkpoint=local",
        "checkpoint.save_interval=1ep",
    )
    plan = _plan(cfg, batches_per_epoch=4)
    assert (plan.eval_interval_steps, plan.save_interval_steps, plan.log_interval_steps) == (5, 4, 3)
    assert plan.time_facts == {
        "max_steps": 10,
        "steps_per_epoch": 4,
        "samples_per_step": 4,
        "tokens_per_step": 512,
    }


def test_an_epoch_duration_over_an_empty_epoch_names_the_field():
    cfg = _cfg("experiment=smoke-cpu", "trainer.max_duration=1ep")
    with pytest.raises(ConfigError, match=r"trainer.max_duration='1ep'.*steps_per_epoch must be > 0"):
        _plan(cfg, batches_per_epoch=0)


def test_precision_auto_follows_the_device_and_the_plan_is_a_value():
    cfg = _cfg("model=mpt-tiny", "trainer.precision=auto")
    assert _plan(cfg).precision == "fp32"
    assert _plan(cfg, device="cuda").precision == "amp_bf16"  # a device value only: no GPU needed
    assert _plan(cfg) == _plan(cfg)
    with pytest.raises(AttributeError):
        _plan(cfg).max_steps = 1  # type: ignore[misc]


def test_eval_batch_size_defaults_to_the_microbatch():
    cfg = _cfg("experiment=smoke-cpu")
    assert _plan(replace(cfg, trainer=replace(cfg.trainer, device_eval_batch_size=7))).eval_batch_size == 7
