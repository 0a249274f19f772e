"""Worker for `test_trainer_ranks.py`: runs the Trainer on this rank's half of fixed batches, saves the result.

Usage: `python -m torch.distributed.run --nproc_per_node=W _trainer_ranks.py OUT STRATEGY` (or plain python
for the one-process reference, STRATEGY=none). Rank 0 writes {"params": full tensors, "losses": [...]} to OUT.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from foundry.models import MPTModelConfig, build_model
from foundry.parallel import ParallelismConfig, init_distributed, teardown, wrap_model
from foundry.train.batching import plan_batches
from foundry.train.config import TrainerConfig
from foundry.train.loop import Trainer

GLOBAL, MICRO, STEPS = 8, 2, 3


def batches() -> list[dict[str, torch.Tensor]]:
    """Global batches with very uneven loss tokens per row (and so per rank)."""
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(STEPS):
        ids = torch.randint(0, 64, (GLOBAL, 16), generator=g)
        labels = ids.clone()
        labels[:3, :12] = -100
        labels[6, -5:] = -100
        out.append({"input_ids": ids, "labels": labels})
    return out


def main(out: str, strategy: str) -> None:
    ctx = init_distributed(ParallelismConfig(strategy=strategy), device=torch.device("cpu"))
    torch.manual_seed(0)
    model = build_model(MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64))
    if strategy != "none":
        model = wrap_model(model, cfg=ParallelismConfig(strategy=strategy), ctx=ctx, precision="fp32")
    device_batch = GLOBAL // ctx.world_size
    lo = ctx.rank * device_batch
    loader = [{k: v[lo : lo + device_batch] for k, v in b.items()} for b in batches()]
    cfg = TrainerConfig(
        global_train_batch_size=GLOBAL,
        device_train_microbatch_size=MICRO,
        device="cpu",
        precision="fp32",
        grad_clip_norm=0.05,  # small enough to clip: the norm must be the global one
        progress_bar=False,
    )
    trainer = Trainer(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        scheduler=None,
        train_loader=loader,
        eval_loader=None,
        cfg=cfg,
        plan=plan_batches(global_batch_size=GLOBAL, world_size=ctx.world_size, microbatch=MICRO),
        max_steps=STEPS,
        eval_interval_steps=0,
        max_seq_len=16,
        device=ctx.device,
    )
    losses, norms = [], []
    for _ in range(STEPS):
        metrics = trainer.train_step(trainer._next_batch())
        losses.append(metrics["train/loss"])
        norms.append(metrics["train/grad_norm"])
    inner = getattr(model, "module", model)
    params = {
        n: p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for n, p in inner.named_parameters()
    }
    if ctx.rank == 0:
        torch.save({"params": params, "losses": losses, "norms": norms}, out)
    if dist.is_initialized():
        dist.barrier()
    teardown(ctx)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
