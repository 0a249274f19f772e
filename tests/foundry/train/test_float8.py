"""trainer.precision=amp_fp8: refused without FP8 hardware; torchao's Float8Linear in the blocks only; it trains.

torchao is not in the dev lock (transformers imports it at start-up whenever it is installed, which costs half
a second and prints warnings on every command), so `make install` puts it in `.cache/fp8` and these tests
add that folder to the path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from foundry.models import MPTModelConfig, build_model
from foundry.precision import check_precision
from foundry.train.compile import compile_blocks
from foundry.train.config import TrainerConfig
from foundry.train.float8 import check_float8_device, convert_to_float8, float8_linear_names

REPO = Path(__file__).resolve().parents[3]
FP8_SITE = REPO / ".cache" / "fp8"


@pytest.fixture
def torchao(monkeypatch):
    if not (FP8_SITE / "torchao").is_dir():
        pytest.fail(
            f"torchao is not in {FP8_SITE}: run `make install` (it installs torchao there for these tests)"
        )
    monkeypatch.syspath_prepend(str(FP8_SITE))

    from torchao.float8.float8_linear import Float8Linear

    return Float8Linear


def _model(seed: int = 0, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = {"d_model": 64, "n_heads": 4, "n_layers": 2, "max_seq_len": 32, "vocab_size": 128, **kw}
    return build_model(MPTModelConfig(**cfg))


def test_fp8_is_refused_on_cpu_naming_what_to_use():
    with pytest.raises(
        ValueError, match=r"amp_fp8 needs an NVIDIA GPU with FP8 tensor cores .*device is cpu: use amp_bf16"
    ):
        check_precision("amp_fp8", device=torch.device("cpu"))
    with pytest.raises(ValueError, match="FP8 tensor cores"):
        check_float8_device(torch.device("cpu"))


def test_fp8_is_read_as_amp_fp8():
    assert TrainerConfig(precision="fp8").precision == "amp_fp8"


def test_train_py_refuses_fp8_on_cpu_with_one_error_line(tmp_path):
    env = {**os.environ, "FOUNDRY_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            "experiment=smoke-cpu",
            "trainer.precision=amp_fp8",
            "run_name=fp8",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "amp_fp8 needs an NVIDIA GPU" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs" / "fp8" / "checkpoints").exists()


def test_only_the_blocks_linear_layers_are_converted(torchao):
    model = _model(tie_word_embeddings=False)
    keys = list(model.state_dict())
    names = convert_to_float8(model, emulate=True)
    expected = {
        f"transformer.blocks.{i}.{n}"
        for i in range(2)
        for n in ("attn.Wqkv", "attn.out_proj", "ffn.up_proj", "ffn.down_proj")
    }
    assert set(names) == expected
    converted = {n for n, m in model.named_modules() if isinstance(m, torchao)}
    assert converted == expected
    assert not isinstance(model.lm_head, torchao)  # the output head stays bf16
    assert list(model.state_dict()) == keys  # checkpoints are unchanged


def test_layers_with_dimensions_not_multiples_of_16_are_skipped():
    model = _model(d_model=40, n_heads=4)  # Wqkv 40 -> 120, ffn 40 -> 160: in_features 40 is not
    assert float8_linear_names(model) == []


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled-blocks"])
def test_fp8_training_tracks_bf16(torchao, compiled):
    """20 AdamW steps on a learnable sequence: FP8 (torch's CPU float8 matmul) stays within 3% of the first
    loss of the bf16 curve at every step."""
    ids = (torch.arange(32)[None, :] * 3 + torch.arange(8)[:, None] * 5) % 128  # a learnable pattern
    curves = {}
    for precision in ("amp_bf16", "amp_fp8"):
        torch._dynamo.reset()
        model = _model()
        if precision == "amp_fp8":
            convert_to_float8(model)
        if compiled:
            compile_blocks(model, backend="aot_eager")
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses = []
        for _ in range(20):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        curves[precision] = losses
    bf16, fp8 = curves["amp_bf16"], curves["amp_fp8"]
    assert bf16[-1] < bf16[0] - 1.0  # it learns
    assert max(abs(a - b) for a, b in zip(fp8, bf16, strict=True)) < 0.03 * bf16[0]
    assert fp8 != bf16  # FP8 arithmetic really ran


def test_conversion_on_the_meta_device_then_materialised_gives_the_same_weights(torchao):
    """FSDP builds on meta and converts before sharding: the per-module init must still reach Float8Linear."""
    from foundry.models import materialize_
    from foundry.parallel.meta_init import materialize_local_

    cfg = MPTModelConfig(
        d_model=64, n_heads=4, n_layers=2, max_seq_len=32, vocab_size=128, init_device="meta"
    )
    torch.manual_seed(0)
    reference = materialize_(build_model(cfg), device="cpu")
    torch.manual_seed(0)
    meta = build_model(cfg)
    convert_to_float8(meta)
    materialize_local_(meta, device=torch.device("cpu"))
    assert any(isinstance(m, torchao) for m in meta.modules())
    for (name, a), b in zip(reference.state_dict().items(), meta.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, msg=name)


def test_fp8_min_dim_leaves_small_layers_in_bf16(torchao):
    """trainer.fp8_min_dim (issue 43): FP8 loses to its casts on small matmuls (125m/350m on an H100)."""
    model = _model(d_model=64, expansion_ratio=4)  # Wqkv 64->192, out_proj 64->64, up 64->256, down 256->64
    assert len(float8_linear_names(model, min_dim=16)) == 8
    assert float8_linear_names(model, min_dim=65) == []  # every layer has a 64-wide side
    names = convert_to_float8(model, emulate=True, min_dim=64)
    assert len(names) == 8 and all(isinstance(dict(model.named_modules())[n], torchao) for n in names)
    with pytest.raises(ValueError, match=r"fp8_min_dim=128\); lower trainer.fp8_min_dim or use amp_bf16"):
        convert_to_float8(_model(), emulate=True, min_dim=128)


def test_rowwise_recipe_converts_and_trains_emulated(torchao):
    torch.manual_seed(0)
    model = _model()
    convert_to_float8(model, emulate=True, recipe="rowwise")
    layer = next(m for m in model.modules() if isinstance(m, torchao))
    assert "rowwise" in str(layer.config).lower() or "axiswise" in str(layer.config).lower()
    ids = torch.randint(0, 128, (2, 32))
    model(ids, labels=ids).loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    with pytest.raises(
        ValueError, match=r"trainer.fp8_recipe='blockwise': choose one of \['tensorwise', 'rowwise'\]"
    ):
        convert_to_float8(_model(), emulate=True, recipe="blockwise")


def test_trainer_config_checks_the_fp8_and_speed_options():
    assert TrainerConfig().speed == "off" and TrainerConfig().fp8_recipe == "tensorwise"
    with pytest.raises(ValueError, match=r"trainer.speed='fast': use auto or off"):
        TrainerConfig(speed="fast")
    with pytest.raises(ValueError, match=r"trainer.fp8_recipe='x': use tensorwise or rowwise"):
        TrainerConfig(fp8_recipe="x")
    with pytest.raises(ValueError, match=r"trainer.fp8_min_dim=8: must be >= 16"):
        TrainerConfig(fp8_min_dim=8)
