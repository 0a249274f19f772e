"""`ParallelismConfig` validation (messages name the field and the fix) and the shipped `conf/parallelism` options."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from foundry.config import register_configs, to_train_config
from foundry.parallel import ParallelismConfig, init_distributed, resolve_backend

CONF = Path(__file__).resolve().parents[3] / "conf"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"strategy": "zero3"}, "parallelism.strategy='zero3': choose one of"),
        ({"backend": "mpi"}, "parallelism.backend"),
        ({"sharding_strategy": "NO_SHARD"}, "NO_SHARD is parallelism.strategy=ddp"),
        ({"mixed_precision": "bf16"}, "parallelism.mixed_precision"),
        ({"shard_size": 0, "sharding_strategy": "HYBRID_SHARD"}, "parallelism.shard_size=0 must be >= 1"),
        ({"shard_size": 2}, "shard_size only applies to sharding_strategy=HYBRID_SHARD"),
        ({"cpu_offload": True, "strategy": "ddp"}, "cpu_offload=true needs parallelism.strategy=fsdp"),
        ({"bucket_cap_mb": 0}, "parallelism.bucket_cap_mb"),
    ],
)
def test_invalid_values_name_the_field_and_the_fix(kwargs, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        ParallelismConfig(**kwargs)


def test_reshard_after_forward_is_derived_from_the_sharding_strategy():
    assert ParallelismConfig(strategy="fsdp").reshard_after_forward
    assert ParallelismConfig(strategy="fsdp", sharding_strategy="HYBRID_SHARD").reshard_after_forward
    assert not ParallelismConfig(strategy="fsdp", sharding_strategy="SHARD_GRAD_OP").reshard_after_forward


@pytest.mark.parametrize(
    ("option", "strategy", "sharding"),
    [
        ("none", "none", "FULL_SHARD"),
        ("ddp", "ddp", "FULL_SHARD"),
        ("fsdp", "fsdp", "FULL_SHARD"),
        ("fsdp-grad-op", "fsdp", "SHARD_GRAD_OP"),
        ("hsdp", "fsdp", "HYBRID_SHARD"),
    ],
)
def test_every_option_composes(option, strategy, sharding):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = to_train_config(compose("train", overrides=[f"parallelism={option}"]))
    assert (cfg.parallelism.strategy, cfg.parallelism.sharding_strategy) == (strategy, sharding)
    assert {p.stem for p in (CONF / "parallelism").glob("*.yaml")} == {
        "none",
        "ddp",
        "fsdp",
        "fsdp-grad-op",
        "hsdp",
    }


def test_backend_auto_is_nccl_on_cuda_and_gloo_on_cpu():
    assert resolve_backend("auto", device=torch.device("cpu")) == "gloo"
    assert resolve_backend("auto", device=torch.device("cuda", 0)) == "nccl"
    with pytest.raises(ValueError, match="backend=nccl needs CUDA"):
        resolve_backend("nccl", device=torch.device("cpu"))


def test_torchrun_with_strategy_none_is_refused_with_the_fix():
    env = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    with pytest.raises(ValueError, match="use parallelism=ddp or parallelism=fsdp"):
        init_distributed(ParallelismConfig(), device=torch.device("cpu"), env=env)


def test_one_process_without_a_strategy_creates_no_group():
    ctx = init_distributed(ParallelismConfig(), device=torch.device("cpu"), env={})
    assert (ctx.rank, ctx.world_size, ctx.owns_group, ctx.is_main) == (0, 1, False, True)
    assert not torch.distributed.is_initialized()
