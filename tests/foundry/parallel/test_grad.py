"""Loss weighting across ranks (simulated, no process group): averaged rank gradients == one-process gradient."""

from __future__ import annotations

import pytest
import torch

from foundry.models import MPTModelConfig, build_model
from foundry.parallel import clip_grad_norm_, microbatch_weight
from foundry.train.batching import loss_tokens, split_batch


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64))


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 64, (8, 16), generator=g)
    labels = ids.clone()
    labels[:2, :11] = -100  # rank 0's half has far fewer loss tokens than rank 1's
    labels[5, -4:] = -100
    return {"input_ids": ids, "labels": labels}


def _accumulate(model: torch.nn.Module, batch: dict, *, micro: int, global_count: int, world: int) -> None:
    for mb in split_batch(batch, micro):
        weight = microbatch_weight(loss_tokens(mb), global_count=global_count, world_size=world)
        (model(**mb).loss * weight).backward()


def test_weights_sum_to_the_world_size_over_a_rank_and_to_one_overall():
    counts = [[3, 5], [10, 2]]  # loss tokens of each rank's microbatches
    total = sum(map(sum, counts))
    per_rank = [sum(microbatch_weight(c, global_count=total, world_size=2) for c in r) for r in counts]
    assert sum(per_rank) / 2 == pytest.approx(1.0)


@pytest.mark.parametrize("world", [2, 4])
def test_rank_average_of_weighted_gradients_is_the_global_token_mean_gradient(world):
    batch = _batch()
    total = loss_tokens(batch)
    ref = _model()
    _accumulate(ref, batch, micro=8, global_count=total, world=1)
    ranks = []
    shard = 8 // world
    for r in range(world):  # each "rank" takes its slice of the global batch, 2 samples per microbatch
        m = _model()
        part = {k: v[r * shard : (r + 1) * shard] for k, v in batch.items()}
        _accumulate(m, part, micro=min(2, shard), global_count=total, world=world)
        ranks.append(m)
    for name, p in ref.named_parameters():
        avg = sum(dict(m.named_parameters())[name].grad for m in ranks) / world  # what DDP/FSDP do
        torch.testing.assert_close(avg, p.grad, rtol=1e-5, atol=1e-6)


def test_clip_grad_norm_matches_torch_on_plain_tensors():
    a, b = _model(), _model()
    batch = _batch()
    for m in (a, b):
        m(**batch).loss.backward()
    ours = clip_grad_norm_(list(a.parameters()), 0.01)
    ref = torch.nn.utils.clip_grad_norm_(list(b.parameters()), 0.01)
    torch.testing.assert_close(ours, ref)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
