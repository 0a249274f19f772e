"""Worker for `test_stream_ranks.py`: the Trainer on this rank's half of fixed mixture batches (train and eval).

Usage: `python -m torch.distributed.run --nproc_per_node=W _stream_ranks.py OUT STRATEGY` (or plain python for
the one-process reference, STRATEGY=none). Rank 0 writes {"mid": run state after 2 steps, "final": metrics}.
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

GLOBAL, STEPS, NAMES = 8, 3, ("c4", "arxiv", "code")


def batches(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Global batches whose rows come from 3 streams, with uneven loss tokens per row."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, 64, (GLOBAL, 16), generator=g)
        labels = ids.clone()
        labels[:3, :12] = -100
        labels[6, -5:] = -100
        out.append(
            {"input_ids": ids, "labels": labels, "stream_id": torch.randint(0, 3, (GLOBAL,), generator=g)}
        )
    return out


def main(out: str, strategy: str) -> None:
    ctx = init_distributed(ParallelismConfig(strategy=strategy), device=torch.device("cpu"))
    torch.manual_seed(0)
    model = build_model(MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64))
    if strategy != "none":
        model = wrap_model(model, cfg=ParallelismConfig(strategy=strategy), ctx=ctx, precision="fp32")
    rows = GLOBAL // ctx.world_size
    lo = ctx.rank * rows

    def shard(data: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        return [{k: v[lo : lo + rows] for k, v in b.items()} for b in data]

    cfg = TrainerConfig(
        global_train_batch_size=GLOBAL,
        device_train_microbatch_size=2,
        device="cpu",
        precision="fp32",
        grad_clip_norm=None,
        progress_bar=False,
        log_interval=2,
    )
    trainer = Trainer(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        scheduler=None,
        train_loader=shard(batches(STEPS, seed=1)),
        eval_loader=shard(batches(2, seed=5)),
        cfg=cfg,
        plan=plan_batches(global_batch_size=GLOBAL, world_size=ctx.world_size, microbatch=2),
        max_steps=STEPS,
        eval_interval_steps=0,
        max_seq_len=16,
        device=ctx.device,
        stream_names=NAMES,
    )
    trainer.train_step(trainer._next_batch())
    trainer.train_step(trainer._next_batch())
    mid = trainer.run_state()["streams"]  # every rank calls it, as the checkpoint saver does
    final = trainer.fit()
    if ctx.rank == 0:
        torch.save({"mid": mid, "final": final}, out)
    if dist.is_initialized():
        dist.barrier()
    teardown(ctx)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
