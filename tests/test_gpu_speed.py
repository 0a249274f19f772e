"""Issue 30 on CUDA (`make test-gpu`; skipped without a GPU): compiled blocks, the fused losses and FP8 give the
eager bf16 results within bf16 tolerance, and `train.py` runs with all three."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from foundry.models.mpt import MPTConfig, MPTForCausalLM
from foundry.models.mpt.loss import (
    chunked_linear_cross_entropy,
    liger_linear_cross_entropy,
    shifted_cross_entropy,
)
from foundry.train.compile import compile_model
from tests.train_py import run_train_py

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

V = 1024


def _fp8_ok() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def _inputs(tokens: int = 4096, d: int = 256) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    h = (torch.randn(2, tokens // 2, d, generator=g) * 0.5).cuda().requires_grad_()
    w = (torch.randn(V * 8, d, generator=g) * 0.05).cuda().requires_grad_()
    labels = torch.randint(0, V * 8, (2, tokens // 2), generator=g).cuda()
    return h, w, labels


@pytest.mark.parametrize("impl", ["chunked", "liger"])
def test_fused_losses_equal_the_plain_loss_in_bf16(impl: str) -> None:
    if impl == "liger":
        pytest.importorskip("liger_kernel", reason="liger-kernel is installed by make gpu-check's wheels")
    h, w, labels = _inputs()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ref = shifted_cross_entropy(torch.nn.functional.linear(h, w), labels)
    ref_grads = torch.autograd.grad(ref, (h, w))
    fused = chunked_linear_cross_entropy if impl == "chunked" else liger_linear_cross_entropy
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = fused(h, w, labels)
    got_grads = torch.autograd.grad(got, (h, w))
    assert abs(got.item() - ref.item()) < 2e-3
    for a, b in zip(got_grads, ref_grads, strict=True):
        assert (a.float() - b.float()).abs().max().item() < 2e-3 * b.float().abs().max().item() + 1e-6


def _curve(*, compiled: bool, fp8: bool, loss_fn: str = "torch_crossentropy", steps: int = 20) -> list[float]:
    torch.manual_seed(0)
    torch._dynamo.reset()
    cfg = MPTConfig(d_model=256, n_heads=4, n_layers=4, vocab_size=V, max_seq_len=256, loss_fn=loss_fn)
    model = MPTForCausalLM(cfg).cuda()
    if fp8:
        from foundry.train.float8 import convert_to_float8

        convert_to_float8(model)
    if compiled:
        compile_model(model, "blocks")  # the blocks and the loss math, as trainer.compile=blocks
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, fused=True)
    ids = ((torch.arange(256)[None, :] * 7 + torch.arange(8)[:, None] * 13) % V).cuda()
    losses = []
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("loss_fn", ["torch_crossentropy", "chunked_crossentropy"])
def test_compiled_blocks_and_loss_track_eager_bf16(loss_fn: str) -> None:
    eager = _curve(compiled=False, fp8=False)
    fast = _curve(compiled=True, fp8=False, loss_fn=loss_fn)
    assert eager[-1] < eager[0] - 1.0
    assert max(abs(a - b) for a, b in zip(fast, eager, strict=True)) < 0.03 * eager[0]


@pytest.mark.skipif(not _fp8_ok(), reason="needs FP8 tensor cores (compute capability >= 8.9)")
def test_fp8_tracks_bf16() -> None:
    pytest.importorskip("torchao", reason="torchao is installed by make gpu-check's wheels")
    bf16 = _curve(compiled=True, fp8=False)
    fp8 = _curve(compiled=True, fp8=True)
    assert fp8 != bf16
    assert max(abs(a - b) for a, b in zip(fp8, bf16, strict=True)) < 0.03 * bf16[0]


def test_train_py_with_compiled_blocks_chunked_loss_and_fp8(tmp_path: Path) -> None:
    precision = "amp_fp8" if _fp8_ok() else "amp_bf16"
    if precision == "amp_fp8":
        pytest.importorskip("torchao", reason="torchao is installed by make gpu-check's wheels")
    run_train_py(
        [
            "model=mpt-tiny",
            "trainer=gpu",
            f"trainer.precision={precision}",
            "trainer.compile=blocks",
            "model.loss_fn=chunked_crossentropy",
            "trainer.max_duration=4ba",
            "trainer.global_train_batch_size=8",
            "trainer.eval_interval=2ba",
            "trainer.eval_subset_num_batches=2",
            "checkpoint=none",
            "run_name=speed",
        ],
        tmp_path,
    )
    metrics = json.loads((tmp_path / "outputs" / "speed" / "final_metrics.json").read_text())
    assert metrics["train/loss"] < 8.0 and metrics["eval/loss"] < 8.0  # ~ln(vocab) at init: finite
