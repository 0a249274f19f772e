"""Checkpoint benchmark: how long a save blocks training (async vs sync), save/load MB/s, resume time.

For a ~100M-parameter MPT with AdamW state (~1.1 GB per checkpoint), to local disk and to a loopback
S3-compatible server (moto): per save, the seconds the training loop is blocked and the seconds until the
checkpoint is complete (manifest published); per load, MB/s; and resume time to the first step (find the
newest checkpoint, download, load, one training step). Prints one JSON line.

    python scripts/bench/checkpoint.py                  # ~100M params
    python scripts/bench/checkpoint.py --layers 2 --d-model 256   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from typing import Any

import torch
from _common import machine
from streaming_remote import start_moto

from foundry.checkpoint import CheckpointConfig, Checkpointer, load_into, resolve_start
from foundry.models import MPTModelConfig, build_model_on
from foundry.optim import AdamWConfig, build_optimizer
from foundry.train.batching import BatchPlan
from foundry.train.config import TrainerConfig
from foundry.train.loop import Trainer


def _trainer(model_cfg: MPTModelConfig, steps: int) -> Trainer:
    torch.manual_seed(0)
    model = build_model_on(model_cfg, device="cpu")
    g = torch.Generator().manual_seed(1)
    batches = [
        {
            "input_ids": (ids := torch.randint(0, model_cfg.vocab_size, (2, 128), generator=g)),
            "labels": ids.clone(),
        }
        for _ in range(steps)
    ]
    cfg = TrainerConfig(
        global_train_batch_size=2, device_train_microbatch_size=2, device="cpu", precision="fp32"
    )
    return Trainer(
        model=model,
        optimizer=build_optimizer(AdamWConfig(lr=1e-4), model=model),
        scheduler=None,
        train_loader=batches,
        eval_loader=None,
        cfg=cfg,
        plan=BatchPlan(2, 2, 2, False),
        max_steps=steps,
        eval_interval_steps=0,
        max_seq_len=128,
        device=torch.device("cpu"),
    )


def _size(folder: str, name: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name, f)) for f in os.listdir(os.path.join(folder, name)))


def _save(
    trainer: Trainer, folder: str, run_dir: str, model_cfg: MPTModelConfig, *, fmt: str, asynchronous: bool
) -> dict[str, float]:
    cfg = CheckpointConfig(save_folder=folder, async_upload=asynchronous)
    ckpt = Checkpointer(cfg, run_name="bench", run_dir=run_dir, every_steps=1, model_config=asdict(model_cfg))
    start = time.perf_counter()
    ckpt.save(trainer, fmt=fmt)
    blocked = ckpt.last_blocked
    ckpt.close()
    return {"blocked_s": blocked, "complete_s": time.perf_counter() - start}


def _resume(model_cfg: MPTModelConfig, folder: str, run_dir: str) -> dict[str, float]:
    fresh = _trainer(model_cfg, 2)
    cfg = CheckpointConfig(save_folder=folder)
    t0 = time.perf_counter()
    start = resolve_start(cfg, run_name="bench", scratch=os.path.join(run_dir, "scratch"))
    assert start is not None
    shutil.rmtree(os.path.join(run_dir, "cache"), ignore_errors=True)
    load_into(
        fresh, start, cfg=cfg, cache_root=os.path.join(run_dir, "cache"), model_config=asdict(model_cfg)
    )
    loaded = time.perf_counter() - t0
    fresh._iter = iter(fresh.train_loader)
    fresh.train_step(next(fresh._iter))
    return {"load_s": loaded, "resume_to_first_step_s": time.perf_counter() - t0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50368)
    args = p.parse_args()
    model_cfg = MPTModelConfig(
        d_model=args.d_model,
        n_heads=12 if args.d_model % 12 == 0 else 8,
        n_layers=args.layers,
        max_seq_len=128,
        vocab_size=args.vocab,
    )
    trainer = _trainer(model_cfg, 1)
    trainer.fit()
    params = sum(p.numel() for p in trainer.model.parameters())
    tmp = tempfile.mkdtemp(prefix="bench-ckpt-")
    moto, endpoint = start_moto()
    os.environ.update(
        S3_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="x",
        AWS_SECRET_ACCESS_KEY="x",
        AWS_DEFAULT_REGION="us-east-1",
    )
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
    out: dict[str, Any] = {"bench": "checkpoint", "params_m": round(params / 1e6, 1)}
    try:
        run_dir = os.path.join(tmp, "run")
        for target in ("local", "s3"):
            for fmt in ("full", "sharded"):
                for mode in ("sync", "async"):
                    folder = (
                        os.path.join(tmp, f"{target}-{fmt}-{mode}")
                        if target == "local"
                        else f"s3://bench/{fmt}-{mode}"
                    )
                    r = _save(trainer, folder, run_dir, model_cfg, fmt=fmt, asynchronous=mode == "async")
                    key = f"{target}_{fmt}_{mode}"
                    out[f"{key}_blocked_s"] = round(r["blocked_s"], 3)
                    out[f"{key}_complete_s"] = round(r["complete_s"], 3)
                    if mode == "sync":
                        if target == "local":
                            out["checkpoint_mb"] = round(_size(folder, "ep0-ba1") / 1e6, 1)
                        out[f"{key}_save_mb_per_s"] = round(out["checkpoint_mb"] / r["complete_s"], 1)
                        res = _resume(model_cfg, folder, run_dir)
                        out[f"{target}_{fmt}_load_mb_per_s"] = round(out["checkpoint_mb"] / res["load_s"], 1)
                        out[f"{target}_{fmt}_resume_to_first_step_s"] = round(
                            res["resume_to_first_step_s"], 3
                        )
        out["async_blocked_over_sync_local_full"] = round(
            out["local_full_async_blocked_s"] / out["local_full_sync_blocked_s"], 3
        )
        out["async_blocked_over_sync_s3_full"] = round(
            out["s3_full_async_blocked_s"] / out["s3_full_sync_blocked_s"], 3
        )
        out["machine"] = machine()
        print(json.dumps(out))
    finally:
        moto.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
