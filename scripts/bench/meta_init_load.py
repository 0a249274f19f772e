"""Peak memory per rank of `init_device: meta` + `pretrained: true` under FSDP2 vs a plain pretrained load.

A Llama-shaped model (default ~134M parameters, ~0.5 GiB fp32) is saved as safetensors in a temp folder;
then for each mode, 2 ranks (torchrun, gloo, CPU) build and shard it with `build_model_on` + `wrap_model`,
as training does. `meta`: built on meta, each rank reads only its shards (`foundry.parallel.pretrained_load`);
`plain`: every rank loads the whole model with `from_pretrained` (model.init_device=cpu), then shards it.
Each rank measures its own peak resident memory (VmHWM) minus a baseline taken after imports and process
group setup; the line reports the per-rank figures against the model's size. Target: `meta` peak growth per
rank well under the full model's size (about its shard plus one tensor in flight).

    python scripts/bench/meta_init_load.py [--hidden 768 --layers 12 --vocab 32000] [--nproc 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from stackbase.venv import use_project_venv

use_project_venv(__file__)  # a fresh shell's `python` lacks the packages: run in the checkout's .venv

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20


def _peak_bytes() -> int:
    """VmHWM of this process (Linux), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def rank_main(folder: Path, mode: str, out: Path) -> None:
    """One rank: baseline after imports, build + shard + load, peak growth; rank 0 writes all ranks' rows."""
    import torch
    import torch.distributed as dist

    from foundry.models import build_model_on
    from foundry.models.config import HFCausalLMConfig
    from foundry.parallel import ParallelismConfig, init_distributed, teardown, wrap_model
    from foundry.parallel.pretrained_load import reset_peak_rss, rss_bytes

    pc = ParallelismConfig(strategy="fsdp")
    ctx = init_distributed(pc, device=torch.device("cpu"))
    dist.barrier()
    reset_peak_rss()
    base = rss_bytes()
    start = time.perf_counter()
    cfg = HFCausalLMConfig(
        pretrained_model_name_or_path=str(folder), init_device="meta" if mode == "meta" else "cpu"
    )
    model = build_model_on(cfg, device=ctx.device, defer_init=True)
    model = wrap_model(model, cfg=pc, ctx=ctx, precision="fp32")
    seconds = time.perf_counter() - start
    local = sum(p.to_local().numel() * p.element_size() for p in model.parameters())  # type: ignore[operator]
    row = {
        "rank": ctx.rank,
        "peak_growth_mib": round((_peak_bytes() - base) / MIB, 1),
        "rss_after_mib": round((rss_bytes() - base) / MIB, 1),
        "local_params_mib": round(local / MIB, 1),
        "seconds": round(seconds, 2),
    }
    rows: list[dict] = [{}] * ctx.world_size
    dist.all_gather_object(rows, row)
    if ctx.rank == 0:
        out.write_text(json.dumps(rows))
    teardown(ctx)


def _save_model(folder: Path, args: argparse.Namespace) -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 8 // 3,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=args.hidden // 64,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.02, generator=gen)
    model.save_pretrained(folder)
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    del model
    return size


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rank-worker", nargs=3, metavar=("FOLDER", "MODE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_worker:
        folder, mode, out = args.rank_worker
        rank_main(Path(folder), mode, Path(out))
        return
    from _common import machine

    with tempfile.TemporaryDirectory(prefix="meta_init_load_") as tmp:
        folder = Path(tmp) / "model"
        size = _save_model(folder, args)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(name, None)
        modes: dict[str, list[dict]] = {}
        for mode in ("meta", "plain"):
            out = Path(tmp) / f"{mode}.json"
            launch = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc_per_node={args.nproc}",
            ]
            subprocess.run(
                [*launch, __file__, "--rank-worker", str(folder), mode, str(out)],
                env=env,
                check=True,
                cwd=REPO,
                stdout=subprocess.DEVNULL,
            )
            modes[mode] = json.loads(out.read_text())
    meta_peak = max(r["peak_growth_mib"] for r in modes["meta"])
    plain_peak = max(r["peak_growth_mib"] for r in modes["plain"])
    line = {
        "bench": "meta_init_load",
        "params_m": round(size / 4 / 1e6, 1),
        "model_mib": round(size / MIB, 1),
        "ranks": args.nproc,
        "meta": modes["meta"],
        "plain": modes["plain"],
        "meta_peak_growth_vs_model": round(meta_peak / (size / MIB), 3),
        "meta_peak_over_local_shard_mib": round(
            max(r["peak_growth_mib"] - r["local_params_mib"] for r in modes["meta"]), 1
        ),
        "plain_peak_growth_vs_model": round(plain_peak / (size / MIB), 3),
        "machine": machine(),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
