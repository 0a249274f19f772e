"""Worker for `test_spike_ranks.py`: 2 ranks, the spike guard, a NaN batch on ONE rank's half; saves the weights.

Usage: `python -m torch.distributed.run --nproc_per_node=2 _spike_ranks.py OUT STRATEGY MODE` with MODE `guard`
(6 batches, batch 2 poisoned on rank 1 only, guard on) or `ref` (the same batches without batch 2, guard off).
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

from foundry.parallel import ParallelismConfig, init_distributed, teardown, wrap_model
from foundry.train.batching import plan_batches
from foundry.train.config import TrainerConfig
from foundry.train.loop import Trainer
from foundry.train.spike_guard import SpikeGuardConfig
from tests.foundry.train.test_spike_guard import POISON, _clean, _Poisonable

GLOBAL, MICRO, STEPS = 8, 2, 5


def main(out: str, strategy: str, mode: str) -> None:
    ctx = init_distributed(ParallelismConfig(strategy=strategy), device=torch.device("cpu"))
    model = wrap_model(_Poisonable(), cfg=ParallelismConfig(strategy=strategy), ctx=ctx, precision="fp32")
    batches = _clean(6)
    if mode == "guard":
        batches[2] = {k: v.clone() for k, v in batches[2].items()}
        batches[2]["input_ids"][GLOBAL - 1, 0] = POISON  # the last row: rank 1's half only
    else:
        del batches[2]
    half = GLOBAL // ctx.world_size
    lo = ctx.rank * half
    loader = [{k: v[lo : lo + half] for k, v in b.items()} for b in batches]
    guard = SpikeGuardConfig(enabled=mode == "guard", snapshot_interval=1, min_history=2, window=4)
    cfg = TrainerConfig(
        global_train_batch_size=GLOBAL,
        device_train_microbatch_size=MICRO,
        device="cpu",
        precision="fp32",
        grad_clip_norm=1.0,
        progress_bar=False,
        spike_guard=guard,
    )
    trainer = Trainer(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2),
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
    trainer.fit()
    inner = getattr(model, "module", model)
    params = {
        n: p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for n, p in inner.named_parameters()
    }
    skipped = trainer.guard.skipped if trainer.guard is not None else []
    if ctx.rank == 0:
        torch.save({"params": params, "skipped": skipped, "step": trainer.state.step}, out)
    if dist.is_initialized():
        dist.barrier()
    teardown(ctx)
    # Seen 1 run in ~20 (and in test-all under load): rank 0 never exits after this point, its Python stack
    # back at <module> with one native thread left (interpreter finalization after the gloo group's teardown;
    # the other rank had exited). Open bug (issue 16 note); the weights are saved and every rank passed the
    # barrier, so the worker leaves without finalization instead of hanging the test for 300 s.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:4])
