"""Worker for `test_float8_fsdp.py`: FP8 training of a small MPT on this rank's half of fixed batches.

Usage: `python -m torch.distributed.run --nproc_per_node=W _float8_ranks.py OUT STRATEGY ALL_GATHER` (or plain
python: one process; STRATEGY=fsdp then makes a 1-rank group). The blocks' linear layers become torchao's
`Float8Linear` (torch's CPU float8 matmul) on the meta device, FSDP2 shards them (ALL_GATHER=1: in FP8), then
AdamW steps under bf16 autocast. Rank 0 writes {"losses": global mean loss per step, "weight_type": the class
of a converted weight's local shard} to OUT. `train` runs it in-process too (one rank, the test's own group).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.distributed as dist

from foundry.models import MPTModelConfig, build_model, materialize_
from foundry.parallel import ParallelismConfig, init_distributed, teardown, wrap_model
from foundry.train.float8 import convert_to_float8

GLOBAL, STEPS = 8, 6
FP8_SITE = Path(__file__).resolve().parents[3] / ".cache" / "fp8"
"""Where `make install` puts torchao for the tests."""


def train(strategy: str, all_gather: bool, env: Mapping[str, str] | None = None) -> dict:
    """The run on this rank; {"losses": ..., "weight_type": ...} (the same on every rank)."""
    cfg = ParallelismConfig(strategy=strategy)
    ctx = init_distributed(cfg, device=torch.device("cpu"), env=env)
    model_cfg = MPTModelConfig(
        d_model=64, n_heads=4, n_layers=2, max_seq_len=32, vocab_size=128, init_device="meta"
    )
    torch.manual_seed(0)
    model = build_model(model_cfg)
    convert_to_float8(model, fsdp_all_gather=all_gather)
    if strategy == "none":
        model = materialize_(model, device="cpu")
    else:
        model = wrap_model(model, cfg=cfg, ctx=ctx, precision="amp_fp8")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids = (torch.arange(32)[None, :] * 3 + torch.arange(GLOBAL)[:, None] * 5) % 128  # a learnable pattern
    rows = GLOBAL // ctx.world_size
    mine = ids[ctx.rank * rows : (ctx.rank + 1) * rows]
    losses = []
    for _ in range(STEPS):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(mine, labels=mine).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        mean = loss.detach().clone()
        if dist.is_initialized():
            dist.all_reduce(mean)
            mean /= ctx.world_size
        losses.append(mean.item())
    weight = model.transformer.blocks[0].ffn.up_proj.weight
    local = weight.to_local() if hasattr(weight, "to_local") else weight.data
    if dist.is_initialized():
        dist.barrier()
    teardown(ctx)
    return {"losses": losses, "weight_type": type(local).__name__, "rank": ctx.rank}


if __name__ == "__main__":
    sys.path.insert(0, str(FP8_SITE))  # torchao
    result = train(sys.argv[2], sys.argv[3] == "1")
    if result["rank"] == 0:
        torch.save(result, sys.argv[1])
