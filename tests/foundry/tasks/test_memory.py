"""`foundry.tasks.memory`: exact parameter counts, the memory arithmetic, and a model too big for the device
refused before the data is built (in-process and through `train.py`)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from foundry.config import register_configs, to_train_config
from foundry.errors import ConfigError
from foundry.models.build import build_model_on
from foundry.models.peft.schema import PeftConfig
from foundry.tasks import memory
from foundry.tasks.memory import ModelSize, check_memory, estimate_memory, model_size, run_estimate
from foundry.tasks.pretrain import pretrain
from streaming.reader.world import World
from tests.train_py import run_train_py

CONF = Path(__file__).resolve().parents[3] / "conf"
ONE = World(num_nodes=1, ranks_per_node=1, rank=0)
CPU = torch.device("cpu")


def _cfg(*overrides: str):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return to_train_config(compose("train", overrides=["run_name=mem", *overrides]))


def test_model_size_counts_a_real_models_parameters_exactly():
    cfg = _cfg("model=mpt-tiny").model
    model = build_model_on(cfg, device="cpu")
    size = model_size(cfg)
    assert size.total == sum(p.numel() for p in model.parameters())
    assert size.trainable == size.total
    assert (size.d_model, size.n_layers, size.vocab_size, size.param_bytes) == (64, 2, 512, 4)


def test_model_size_counts_lora_adapters_as_the_only_trainable_parameters():
    cfg = replace(_cfg("model=mpt-tiny").model, peft_config=PeftConfig(r=4, lora_alpha=8))
    model = build_model_on(cfg, device="cpu")
    size = model_size(cfg)
    assert size.total == sum(p.numel() for p in model.parameters())
    assert size.trainable == sum(p.numel() for p in model.parameters() if p.requires_grad) < size.total


def test_estimate_adds_weights_gradients_adamw_states_and_activations():
    size = ModelSize(total=1000, trainable=100, param_bytes=4, d_model=8, n_layers=2, vocab_size=10)
    est = estimate_memory(
        size, seq_len=4, microbatch=2, activation_bytes=4, optimizer_states=2, activation_checkpointing=False
    )
    assert (est.params, est.grads, est.optimizer) == (4000, 400, 800)
    assert est.activations == 2 * 17 * 8 * 8 * 4 + 3 * 8 * 10 * 4
    ckpt = estimate_memory(
        size, seq_len=4, microbatch=2, activation_bytes=4, optimizer_states=2, activation_checkpointing=True
    )
    assert ckpt.activations == 2 * 8 * 8 * 4 + 17 * 8 * 8 * 4 + 3 * 8 * 10 * 4 < est.activations
    sharded = estimate_memory(
        size,
        seq_len=4,
        microbatch=2,
        activation_bytes=4,
        optimizer_states=2,
        activation_checkpointing=False,
        shards=4,
    )
    assert sharded.model_state == est.model_state // 4 and sharded.activations == est.activations


def test_the_fused_loss_counts_a_chunk_of_logits_and_the_weight_gradient_not_the_full_logits():
    size = ModelSize(total=10**8, trainable=10**8, param_bytes=4, d_model=768, n_layers=12, vocab_size=50368)
    kw = {"seq_len": 2048, "microbatch": 8, "activation_bytes": 2, "optimizer_states": 2}
    plain = estimate_memory(size, activation_checkpointing=False, **kw)
    fused = estimate_memory(size, activation_checkpointing=False, fused_loss=True, **kw)
    tokens = 2048 * 8
    assert plain.activations - fused.activations == 3 * tokens * 4 * (50368 - 768) - 50368 * 768 * 4
    chunked = _cfg(
        "model=mpt-125m", "model.loss_fn=chunked_crossentropy", "trainer.device_train_microbatch_size=8"
    )
    full = _cfg("model=mpt-125m", "trainer.device_train_microbatch_size=8")
    assert (
        run_estimate(chunked, world=ONE, precision="amp_bf16").total
        < run_estimate(full, world=ONE, precision="amp_bf16").total
    )


def test_a_model_too_big_for_the_memory_is_refused_with_the_estimate_and_the_options():
    cfg = _cfg("model=mpt-13b", "trainer.device_train_microbatch_size=4")
    with pytest.raises(ConfigError) as info:
        check_memory(cfg, device=CPU, world=ONE, precision="fp32", available=(16 * 10**9, "available RAM"))
    text = str(info.value)
    for needle in (
        "does not fit in memory on cpu",
        "parameters 51.4 GB (12.9B fp32)",
        "gradients 51.4 GB",
        "optimizer state 102.8 GB (2 fp32",
        "activations",
        "microbatch 4 x 2048 tokens, 40 layers of d_model 5120",
        "16.0 GB is available RAM",
        "a smaller model",
        "model.init_device=meta with parallelism=fsdp",
        "trainer.precision=amp_bf16",
        "trainer.device_train_microbatch_size (now 4)",
        "trainer.memory_check=false",
    ):
        assert needle in text, text
    assert "\n" not in text


def test_a_model_that_fits_passes_and_memory_check_false_skips():
    tiny = _cfg("model=mpt-tiny")
    assert check_memory(tiny, device=CPU, world=ONE, precision="fp32", available=(10**9, "RAM")) is not None
    big = _cfg("model=mpt-13b", "trainer.memory_check=false")
    assert check_memory(big, device=CPU, world=ONE, precision="fp32", available=(10**9, "RAM")) is None


def test_cpu_ranks_of_one_node_share_its_ram():
    cfg = _cfg("model=mpt-tiny")
    est = check_memory(cfg, device=CPU, world=ONE, precision="fp32", available=(10**9, "RAM"))
    assert est is not None
    two = World(num_nodes=1, ranks_per_node=2, rank=0)
    with pytest.raises(ConfigError, match="for 2 ranks"):
        check_memory(cfg, device=CPU, world=two, precision="fp32", available=(est.total + 1, "RAM"))


def test_available_memory_reads_the_cpus_free_ram():
    free = memory.available_memory(CPU)
    assert free is not None and free[0] > 0


def test_pretrain_refuses_before_building_any_data(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "available_memory", lambda device: (1000, "available RAM"))
    built: list[str] = []

    def data_builder(cfg, *, world, is_main):
        built.append("data")
        raise AssertionError("the data must not be built")

    cfg = _cfg("experiment=smoke-cpu")
    with pytest.raises(ConfigError, match="does not fit in memory"):
        pretrain(cfg, run_dir=tmp_path, data_builder=data_builder)
    assert built == []


@pytest.mark.slow  # ~11 s: train.py's imports in a subprocess
def test_train_py_refuses_mpt_13b_in_seconds_with_one_error_line(tmp_path):
    start = time.monotonic()
    proc = run_train_py(["model=mpt-13b", "run_name=huge"], tmp_path, ok=None, full_error=False, timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "does not fit in memory" in errors[0], proc.stderr[-3000:]
    assert not (tmp_path / "cache").exists()  # refused before the quick-start data was built
    assert not (tmp_path / "outputs" / "huge").exists()
    assert elapsed < 60, elapsed
