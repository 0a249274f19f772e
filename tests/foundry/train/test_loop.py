"""The training loop: exact gradient accumulation, auto microbatching on (fake) OOM, eval, state."""

from __future__ import annotations

import copy

import pytest
import torch

from foundry.models import MPTModelConfig, build_model
from foundry.optim import AdamWConfig, build_optimizer
from foundry.train.batching import plan_batches
from foundry.train.config import TrainerConfig
from foundry.train.loop import Trainer


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64)
    return build_model(cfg)


def _batches(n: int, bs: int = 8, seq: int = 16, seed: int = 1) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, 64, (bs, seq), generator=g)
        labels = ids.clone()
        labels[:, -3:] = -100  # uneven loss tokens per row: weighting must be by tokens
        labels[0, :8] = -100
        out.append({"input_ids": ids, "labels": labels})
    return out


def _trainer(model, *, microbatch, loader, max_steps=1, eval_loader=None, sgd=True, **cfg_kw) -> Trainer:
    cfg_kw = {"precision": "fp32", "grad_clip_norm": None, **cfg_kw}
    cfg = TrainerConfig(
        global_train_batch_size=8,
        device_train_microbatch_size=microbatch,
        device="cpu",
        progress_bar=False,
        **cfg_kw,
    )
    # SGD: Adam would amplify float noise in exactly-zero gradients (the key bias) and hide real equality
    opt = (
        torch.optim.SGD(model.parameters(), lr=0.1)
        if sgd
        else build_optimizer(AdamWConfig(lr=1e-3), model=model)
    )
    plan = plan_batches(global_batch_size=8, world_size=1, microbatch=microbatch)
    return Trainer(
        model=model,
        optimizer=opt,
        scheduler=None,
        train_loader=loader,
        eval_loader=eval_loader,
        cfg=cfg,
        plan=plan,
        max_steps=max_steps,
        eval_interval_steps=0,
        max_seq_len=16,
        device=torch.device("cpu"),
    )


def _grads_after_backward(microbatch: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model = _model()
    tr = _trainer(model, microbatch=microbatch, loader=[])
    loss = tr._forward_backward(_batches(1)[0])
    return loss, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_grad_accumulation_4x2_equals_one_batch_of_8():
    loss8, g8 = _grads_after_backward(8)
    loss2, g2 = _grads_after_backward(2)
    torch.testing.assert_close(loss2, loss8, rtol=1e-5, atol=1e-6)
    for name in g8:
        torch.testing.assert_close(g2[name], g8[name], rtol=1e-4, atol=1e-6, msg=name)


def test_uneven_last_microbatch_is_weighted_by_tokens():
    loss8, g8 = _grads_after_backward(8)
    loss3, g3 = _grads_after_backward(3)  # 3 + 3 + 2
    torch.testing.assert_close(loss3, loss8, rtol=1e-5, atol=1e-6)
    for name in g8:
        torch.testing.assert_close(g3[name], g8[name], rtol=1e-4, atol=1e-6, msg=name)


def test_training_steps_match_between_microbatch_sizes():
    m1, m2 = _model(), _model()
    batches = _batches(3)
    t1 = _trainer(m1, microbatch=8, loader=batches, max_steps=3)
    t2 = _trainer(m2, microbatch=2, loader=batches, max_steps=3)
    t1.fit()
    t2.fit()
    for (n, a), b in zip(m1.named_parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=n)
    assert t1.state.samples == t2.state.samples == 24


class _OOMAbove(torch.nn.Module):
    """Wraps a model and raises a CUDA-style OOM for microbatches larger than `limit`."""

    def __init__(self, inner: torch.nn.Module, limit: int) -> None:
        super().__init__()
        self.inner = inner
        self.limit = limit
        self.seen: list[int] = []

    def forward(self, **batch):
        n = batch["input_ids"].shape[0]
        self.seen.append(n)
        if n > self.limit:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (fake)")
        return self.inner(**batch)


def test_auto_microbatch_halves_on_oom_and_retries_the_same_batch():
    ref_model = _model()
    ref = _trainer(ref_model, microbatch=8, loader=_batches(2), max_steps=2)
    ref.fit()

    model = _OOMAbove(_model(), limit=2)
    tr = _trainer(model, microbatch="auto", loader=_batches(2), max_steps=2)
    metrics = tr.fit()
    assert tr.state.microbatch_size == 2  # 8 -> 4 -> 2, remembered
    assert model.seen[:2] == [8, 4] and set(model.seen[2:]) == {2}
    assert tr.state.step == 2 and tr.state.samples == 16  # nothing lost or double-counted
    assert metrics["trainer/device_train_microbatch_size"] == 2
    for (n, a), b in zip(ref_model.named_parameters(), model.inner.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=n)


def test_oom_without_auto_is_raised():
    model = _OOMAbove(_model(), limit=2)
    tr = _trainer(model, microbatch=4, loader=_batches(1))
    with pytest.raises(RuntimeError, match="out of memory"):
        tr.fit()


def test_oom_at_microbatch_one_gives_an_actionable_error():
    model = _OOMAbove(_model(), limit=0)
    tr = _trainer(model, microbatch="auto", loader=_batches(1))
    with pytest.raises(RuntimeError, match="microbatch_size=1"):
        tr.fit()


def test_other_errors_are_not_swallowed_by_auto():
    class Broken(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, **batch):
            raise RuntimeError("shape mismatch")

    tr = _trainer(Broken(), microbatch="auto", loader=_batches(1))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        tr.fit()


def test_epochs_wrap_and_eval_reports_loss_and_perplexity():
    model = _model()
    tr = _trainer(model, microbatch=4, loader=_batches(2), max_steps=5, eval_loader=_batches(2, seed=5))
    metrics = tr.fit()
    assert tr.state.epoch == 2 and tr.state.step_in_epoch == 1
    assert metrics["eval/perplexity"] == pytest.approx(
        torch.tensor(metrics["eval/loss"]).exp().item(), rel=1e-6
    )


def test_grad_clipping_bounds_the_update_norm():
    model = _model()
    tr = _trainer(model, microbatch=8, loader=_batches(1), grad_clip_norm=1e-3)
    before = [p.detach().clone() for p in model.parameters()]
    metrics = tr.train_step(_batches(1)[0])
    assert metrics["train/grad_norm"] > 1e-3  # the pre-clip norm is reported
    step = torch.sqrt(sum(((p.detach() - b) ** 2).sum() for p, b in zip(model.parameters(), before)))
    assert step == pytest.approx(0.1 * 1e-3, rel=1e-3)  # SGD lr 0.1 x clipped norm 1e-3


def test_state_dict_round_trip_continues_identically():
    batches = _batches(4)
    a = _trainer(_model(), microbatch=4, loader=batches, max_steps=4, sgd=False)
    a.fit()
    b = _trainer(_model(), microbatch=4, loader=batches, max_steps=2, sgd=False)
    b.fit()
    state = copy.deepcopy(b.state_dict())
    assert set(state) == {"model", "optimizer", "run", "rng"}
    assert set(state["run"]) == {"scheduler", "scaler", "state", "dataloader"}
    c = _trainer(_model(seed=9), microbatch=4, loader=batches[2:], max_steps=4, sgd=False)
    c.load_state_dict(state)
    assert c.state.step == 2
    c.fit()
    for (n, x), y in zip(a.model.named_parameters(), c.model.parameters()):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6, msg=n)


def test_bf16_autocast_runs_on_cpu():
    model = _model()
    tr = _trainer(model, microbatch=4, loader=_batches(1), precision="amp_bf16")
    metrics = tr.fit()
    assert torch.isfinite(torch.tensor(metrics["train/loss"]))


def test_fp16_on_cpu_is_rejected_with_advice():
    with pytest.raises(ValueError, match="amp_fp16 needs CUDA"):
        _trainer(_model(), microbatch=4, loader=[], precision="amp_fp16")


@pytest.mark.slow
def test_torch_compile_option_trains_like_eager():
    eager, compiled = _model(), _model()
    a = _trainer(eager, microbatch=4, loader=_batches(2), max_steps=2)
    b = _trainer(compiled, microbatch=4, loader=_batches(2), max_steps=2, compile=True)
    la, lb = a.fit()["train/loss"], b.fit()["train/loss"]
    assert lb == pytest.approx(la, rel=1e-3)
