"""`trainer.speed=auto` (issue 43): the table's row by model size and GPU, only default settings filled in,
nothing changed off a GPU or with speed=off, and the line that says what was picked."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from foundry.config import register_configs, to_train_config
from foundry.train.speed import SPEED_TABLE, apply_speed, pick_speed

CONF = Path(__file__).resolve().parents[3] / "conf"
CUDA = torch.device("cuda")
H100 = ("NVIDIA H100 80GB HBM3", (9, 0))
A100 = ("NVIDIA A100-SXM4-80GB", (8, 0))


def _cfg(*overrides: str):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return to_train_config(compose("train", overrides=["run_name=speed", *overrides]))


def _params(d: int, layers: int) -> float:
    return 12.0 * layers * d * d


@pytest.mark.parametrize(
    ("d", "layers", "size", "fp8"),
    [(768, 12, "mpt-125m", False), (1024, 24, "mpt-350m", False), (2048, 24, "mpt-1b", True),
     (2560, 32, "mpt-3b", True), (4096, 32, "mpt-3b", True)],
)  # fmt: skip
def test_each_matrix_size_gets_its_own_row(d, layers, size, fp8):
    row = pick_speed(_params(d, layers), capability=H100[1], fp8_available=True)
    assert row.size == size and row.fp8 is fp8
    assert row.compile == "blocks" and row.attn_impl == "cudnn" and row.measured


def test_no_fp8_without_fp8_tensor_cores_or_torchao_and_flash_first_before_hopper():
    one_b = _params(2048, 24)
    assert not pick_speed(one_b, capability=A100[1], fp8_available=True).fp8
    assert pick_speed(one_b, capability=A100[1], fp8_available=True).attn_impl == "flash"
    assert not pick_speed(one_b, capability=H100[1], fp8_available=False).fp8
    assert pick_speed(one_b, capability=(8, 9), fp8_available=True).fp8


def test_the_table_is_ordered_by_size_and_covers_every_model():
    bounds = [r.max_params for r in SPEED_TABLE]
    assert bounds == sorted(bounds) and bounds[-1] == float("inf")


def test_auto_fills_the_defaults_and_names_what_it_picked():
    cfg = _cfg("model=mpt-1b", "trainer=gpu")
    assert cfg.trainer.speed == "auto" and cfg.trainer.precision == "auto"
    fast, line = apply_speed(cfg, device=CUDA, gpu=H100, fp8_available=True)
    assert fast.trainer.compile == "blocks" and fast.trainer.precision == "amp_fp8"
    assert fast.model.attn_config.attn_impl == "cudnn" and fast.model.loss_fn == cfg.model.loss_fn
    assert line is not None and line.startswith("speed=auto on NVIDIA H100 80GB HBM3: trainer.compile=blocks")
    assert "trainer.precision=amp_fp8" in line and "fastest measured at mpt-1b" in line
    assert cfg.trainer.compile == "none"  # the input is not modified


def test_explicit_settings_win():
    cfg = _cfg("model=mpt-1b", "trainer=gpu", "trainer.precision=amp_bf16", "trainer.compile=model",
               "model.attn_config.attn_impl=cudnn")  # fmt: skip
    fast, line = apply_speed(cfg, device=CUDA, gpu=H100, fp8_available=True)
    assert fast.trainer.precision == "amp_bf16" and fast.trainer.compile == "model"
    assert fast.model.attn_config.attn_impl == "cudnn"
    assert line is not None and "nothing to change" in line
    # `flash` (llm-foundry's recipes) asks for a fused kernel: auto picks the fastest measured one
    assert _cfg("model=mpt-1b").model.attn_config.attn_impl == "flash"
    assert (
        apply_speed(_cfg("model=mpt-1b", "trainer=gpu"), device=CUDA, gpu=A100)[0].model.attn_config.attn_impl
        == "flash"
    )


def test_nothing_changes_off_a_gpu_or_with_speed_off():
    cfg = _cfg("model=mpt-125m", "trainer=gpu")
    assert apply_speed(cfg, device=torch.device("cpu"), gpu=H100, fp8_available=True) == (cfg, None)
    off = _cfg("model=mpt-125m", "trainer=gpu", "trainer.speed=off")
    assert apply_speed(off, device=CUDA, gpu=H100, fp8_available=True) == (off, None)
    assert _cfg("model=mpt-125m").trainer.speed == "off"  # the default (CPU) trainer


def test_a_bad_speed_is_one_error_line(tmp_path):
    from tests.train_py import run_train_py

    proc = run_train_py(["model=mpt-tiny", "trainer.speed=fast"], tmp_path, ok=False, full_error=False)
    err = proc.stderr.strip().splitlines()
    assert err[-1].startswith("error:") and "trainer.speed='fast': use auto or off" in err[-1]
    assert "Traceback" not in proc.stderr
