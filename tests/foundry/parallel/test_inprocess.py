"""In-process 1-rank gloo group (HashStore): FSDP2/DDP wrapping, sharded meta init, sync control, clipping.

One rank is enough to run every code path of `foundry.parallel` in a fraction of a second; the 2-rank
numerics are in `test_torchrun.py` (dist tier).
"""

from __future__ import annotations

import gc

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from foundry.models import MPTModelConfig, build_model, materialize_
from foundry.parallel import (
    DistContext,
    ParallelismConfig,
    clip_grad_norm_,
    gradient_sync,
    init_distributed,
    mp_policy,
    teardown,
    transformer_blocks,
    wrap_model,
)

CFG = MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64)
CPU = torch.device("cpu")


@pytest.fixture
def group():
    ctx = init_distributed(ParallelismConfig(strategy="fsdp"), device=CPU, env={})
    assert ctx.owns_group and dist.get_world_size() == 1
    yield ctx
    teardown(ctx)
    assert not dist.is_initialized()


def _model(device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(CFG, device=device)
    return materialize_(model, device=CPU) if device == "meta" else model


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "labels": ids.clone()}


def _steps(model: torch.nn.Module, n: int = 2) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(n):
        loss = model(**_batch()).loss
        loss.backward()
        clip_grad_norm_(list(model.parameters()), 0.5)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _cfg(**kw) -> ParallelismConfig:
    return ParallelismConfig(strategy="fsdp", **kw)


def test_fsdp_shards_every_block_and_trains_like_the_plain_model(group):
    ref = _steps(_model())
    model = wrap_model(_model(), cfg=_cfg(), ctx=group, precision="fp32")
    assert isinstance(model, FSDPModule) and all(isinstance(b, FSDPModule) for b in transformer_blocks(model))
    assert all(isinstance(p, DTensor) for p in model.parameters())
    assert _steps(model) == pytest.approx(ref, abs=1e-6)


def test_sharded_meta_init_equals_the_unsharded_meta_init(group):
    ref = _model("meta")
    torch.manual_seed(0)
    model = wrap_model(build_model(CFG, device="meta"), cfg=_cfg(), ctx=group, precision="fp32")
    got = {n: p.full_tensor() for n, p in model.named_parameters()}
    assert not any(t.is_meta for t in model.buffers())
    for name, p in ref.named_parameters():
        torch.testing.assert_close(got[name], p, rtol=0, atol=0)


def test_activation_checkpointing_keeps_names_and_gradients(group):
    plain, ckpt = _model(), _model()
    wrap_model(ckpt, cfg=ParallelismConfig(activation_checkpointing=True), ctx=group, precision="fp32")
    assert [n for n, _ in plain.named_parameters()] == [n for n, _ in ckpt.named_parameters()]
    for m in (plain, ckpt):
        m(**_batch()).loss.backward()
    for p, q in zip(plain.parameters(), ckpt.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_ddp_wraps_and_no_sync_defers_the_reduction(group):
    model = wrap_model(_model(), cfg=ParallelismConfig(strategy="ddp"), ctx=group, precision="fp32")
    assert isinstance(model, DistributedDataParallel)
    with gradient_sync(model, enabled=False):
        assert not model.require_backward_grad_sync
        model(**_batch()).loss.backward()
    assert model.require_backward_grad_sync


def test_fsdp_gradient_sync_is_switched_off_only_inside_the_block(group, monkeypatch):
    model = wrap_model(_model(), cfg=_cfg(), ctx=group, precision="fp32")
    calls = []
    monkeypatch.setattr(model, "set_requires_gradient_sync", lambda on: calls.append(on))
    with gradient_sync(model, enabled=False):
        pass
    with gradient_sync(model, enabled=True):
        pass
    assert calls == [False, True, True, True]


def test_clip_grad_norm_on_dtensor_grads_equals_the_plain_norm(group):
    plain = _model()
    sharded = wrap_model(_model(), cfg=_cfg(), ctx=group, precision="fp32")
    for m in (plain, sharded):
        m(**_batch()).loss.backward()
    ref = torch.nn.utils.clip_grad_norm_(list(plain.parameters()), 0.1)
    got = clip_grad_norm_(list(sharded.parameters()), 0.1)
    assert not isinstance(got, DTensor)
    torch.testing.assert_close(got, ref)


@pytest.mark.parametrize(
    ("mixed", "precision", "param", "reduce"),
    [
        ("DEFAULT", "amp_bf16", torch.bfloat16, torch.float32),
        ("PURE", "amp_bf16", torch.bfloat16, torch.bfloat16),
        ("FULL", "amp_bf16", None, None),
        ("DEFAULT", "fp32", None, None),
    ],
)
def test_mixed_precision_policy(mixed, precision, param, reduce):
    policy = mp_policy(_cfg(mixed_precision=mixed), precision=precision)
    assert (policy.param_dtype, policy.reduce_dtype) == (param, reduce)


def test_bf16_fsdp_with_activation_checkpointing_trains(group):
    cfg = _cfg(mixed_precision="PURE", activation_checkpointing=True)
    model = wrap_model(_model(), cfg=cfg, ctx=group, precision="amp_bf16")
    losses = _steps(model, n=3)
    assert losses[-1] < losses[0]


def test_hybrid_shard_builds_a_replicate_by_shard_mesh(group):
    model = wrap_model(_model(), cfg=_cfg(sharding_strategy="HYBRID_SHARD"), ctx=group, precision="fp32")
    mesh = next(model.parameters()).device_mesh
    assert mesh.mesh_dim_names == ("replicate", "shard") and mesh.shape == (1, 1)


def test_cpu_offload_on_cpu_is_refused_with_advice(group):
    with pytest.raises(ValueError, match="cpu_offload=true only applies to CUDA"):
        wrap_model(_model(), cfg=_cfg(cpu_offload=True), ctx=group, precision="fp32")


def test_an_existing_group_is_used_and_left_alone(group):
    ctx = init_distributed(ParallelismConfig(strategy="ddp"), device=CPU, env={})
    assert isinstance(ctx, DistContext) and not ctx.owns_group
    teardown(ctx)
    assert dist.is_initialized()


def test_any_transformers_causal_lm_is_sharded_per_block(group):
    from transformers import GPT2Config, GPT2LMHeadModel

    def gpt2() -> torch.nn.Module:
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16))

    ref = _steps(gpt2())
    model = wrap_model(gpt2(), cfg=_cfg(), ctx=group, precision="fp32")
    assert [type(b).__name__ for b in transformer_blocks(model)] == ["FSDPGPT2Block"] * 2
    assert _steps(model) == pytest.approx(ref, abs=1e-6)


def test_teardown_frees_a_ddp_model_in_a_cycle_before_it_destroys_the_group(monkeypatch):
    """A 2-rank DDP finetune hung after training: its DistributedDataParallel, left in a reference cycle, was
    collected after the group was destroyed (by a collection inside an atexit hook), so its reducer dropped the
    last reference to the gloo group, whose destructor, holding the GIL, waited for a worker thread that needed
    the GIL. `teardown` now collects such cycles while the group is still registered."""
    ctx = init_distributed(ParallelismConfig(strategy="ddp"), device=CPU, env={})
    holder: dict[str, object] = {}
    holder["model"] = wrap_model(_model(), cfg=ParallelismConfig(strategy="ddp"), ctx=ctx, precision="fp32")
    holder["self"] = holder  # a cycle, as a trainer's hooks and callbacks make
    del holder
    alive: list[int] = []
    real = dist.destroy_process_group

    def destroy(*args, **kwargs):
        alive.append(sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects()))
        return real(*args, **kwargs)

    monkeypatch.setattr(dist, "destroy_process_group", destroy)
    gc.disable()  # no collection but teardown's own between here and the group's end
    try:
        teardown(ctx)
    finally:
        gc.enable()
    assert alive == [0]  # was [1]
    assert not dist.is_initialized()
