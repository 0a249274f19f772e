"""Batch arithmetic and splitting (pure), OOM recognition and the microbatch back-off."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from foundry.train.auto_microbatch import is_oom, next_microbatch_size
from foundry.train.batching import loss_tokens, plan_batches, split_batch


@settings(deadline=None, max_examples=100)
@given(world=st.integers(1, 16), per=st.integers(1, 64), mb=st.integers(1, 80))
def test_plan_divides_the_global_batch(world, per, mb):
    plan = plan_batches(global_batch_size=world * per, world_size=world, microbatch=mb)
    assert plan.device_batch_size == per
    assert plan.microbatch_size == min(mb, per)
    assert plan.grad_accum == math.ceil(per / min(mb, per))
    assert not plan.auto_microbatch


def test_plan_auto_starts_at_the_device_batch_and_rejects_uneven_worlds():
    plan = plan_batches(global_batch_size=48, world_size=2, microbatch="auto")
    assert plan.microbatch_size == 24 and plan.auto_microbatch and plan.grad_accum == 1
    with pytest.raises(ValueError, match="not divisible by the world size 5"):
        plan_batches(global_batch_size=48, world_size=5, microbatch=2)


@settings(deadline=None, max_examples=100)
@given(n=st.integers(1, 50), mb=st.integers(1, 60))
def test_split_batch_covers_every_row_once_in_order(n, mb):
    batch = {"input_ids": torch.arange(n).unsqueeze(1), "labels": torch.arange(n).unsqueeze(1)}
    parts = split_batch(batch, mb)
    assert torch.equal(torch.cat([p["input_ids"] for p in parts]), batch["input_ids"])
    assert (
        all(p["input_ids"].shape[0] == mb for p in parts[:-1]) and 0 < parts[-1]["input_ids"].shape[0] <= mb
    )


def test_composer_example_48_in_microbatches_of_11():
    sizes = [p["input_ids"].shape[0] for p in split_batch({"input_ids": torch.zeros(48, 1)}, 11)]
    assert sizes == [11, 11, 11, 11, 4]


def test_loss_tokens_counts_shifted_targets():
    labels = torch.tensor([[1, 2, 3, -100], [-100, 5, 6, 7]])
    assert loss_tokens({"labels": labels}) == 5


def test_oom_recognition():
    assert is_oom(RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"))
    assert is_oom(RuntimeError("CUDA error: out of memory"))
    assert is_oom(torch.OutOfMemoryError("x"))
    assert not is_oom(RuntimeError("size mismatch"))
    assert not is_oom(ValueError("out of memory"))


def test_backoff_halves_then_gives_up_at_one():
    assert [next_microbatch_size(n) for n in (16, 5, 2)] == [8, 2, 1]
    with pytest.raises(RuntimeError, match="microbatch_size=1"):
        next_microbatch_size(1)
