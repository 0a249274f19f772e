"""Model step throughput: ours vs transformers' MptForCausalLM (CPU), or tokens/s + MFU on a GPU.

CPU (default): forward+backward tokens/s for mpt-tiny and a ~20M-parameter config, our MPTForCausalLM and
transformers' MptForCausalLM holding the same weights, alternating runs in one process; prints the ratio.
Both use the configuration transformers' MPT supports (ALiBi, no biases, LayerNorm), fp32.

GPU (`--device cuda`): train steps (fwd+bwd+AdamW) in bf16 autocast with SDPA (flash) for the recipe
sizes at seq 2048; reports tokens/s and MFU (llm-foundry convention, full S^2 attention flops). Without a
GPU it says so and exits 0.

    python scripts/bench/model_step.py                     # CPU comparison
    python scripts/bench/model_step.py --device cuda --sizes mpt-125m mpt-350m mpt-1b
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from stackbase.venv import use_project_venv

use_project_venv(__file__)  # a fresh shell's `python` lacks the packages: run in the checkout's .venv

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

from foundry.models import AttnConfig, MPTModelConfig, build_model_on
from foundry.models.export import to_hf_mpt_config

CPU_CASES = {
    # name: (config kwargs, batch, seq)
    "mpt-tiny": ({"d_model": 64, "n_heads": 4, "n_layers": 2, "vocab_size": 512, "max_seq_len": 128}, 8, 128),
    "mpt-20m": (
        {"d_model": 512, "n_heads": 8, "n_layers": 6, "vocab_size": 4096, "max_seq_len": 256},
        4,
        256,
    ),
}
GPU_SIZES = {  # recipe dimensions (foundry.md §1.9) and a default micro-batch for one 80 GB GPU
    "mpt-125m": (768, 12, 12, 32),
    "mpt-350m": (1024, 16, 24, 16),
    "mpt-760m": (1536, 12, 24, 12),
    "mpt-1b": (2048, 16, 24, 8),
}
PEAK_BF16 = {"h200": 989.5e12, "h100": 989.5e12, "a100": 312e12, "a10": 125e12}
HF_COMPATIBLE = {"no_bias": True, "norm_type": "layernorm"}  # and ALiBi (attn_config below)


def _time_steps(step: Callable[[], None], *, warmup: int, iters: int, sync: Callable[[], None]) -> float:
    for _ in range(warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    sync()
    return (time.perf_counter() - start) / iters


def _fwd_bwd(model: torch.nn.Module, ids: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()

    return step


def bench_cpu(*, rounds: int, iters: int) -> list[dict]:
    """Alternates ours / transformers for each CPU case; returns one result row per case."""
    from transformers import MptForCausalLM as HFMptForCausalLM

    rows = []
    for name, (kw, batch, seq) in CPU_CASES.items():
        torch.manual_seed(0)
        schema = MPTModelConfig(**kw, **HF_COMPATIBLE, attn_config=AttnConfig(alibi=True))
        ours = build_model_on(schema, device="cpu").train()
        theirs = HFMptForCausalLM(to_hf_mpt_config(ours.config)).train()
        missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
        assert set(missing) <= {"lm_head.weight"} and not unexpected, (missing, unexpected)
        theirs.tie_weights()
        ids = torch.randint(0, kw["vocab_size"], (batch, seq))
        with torch.no_grad():
            diff = (ours(ids).logits - theirs(ids).logits).abs().max().item()
        times: dict[str, list[float]] = {"ours": [], "transformers": []}
        for _ in range(rounds):
            for label, model in (("ours", ours), ("transformers", theirs)):
                t = _time_steps(_fwd_bwd(model, ids), warmup=1, iters=iters, sync=lambda: None)
                times[label].append(t)
        tok = batch * seq
        ours_tps = tok / statistics.median(times["ours"])
        hf_tps = tok / statistics.median(times["transformers"])
        rows.append(
            {
                "case": name,
                "params": ours.num_params(),
                "batch": batch,
                "seq": seq,
                "ours_tokens_per_s": round(ours_tps),
                "transformers_tokens_per_s": round(hf_tps),
                "ratio": round(ours_tps / hf_tps, 3),
                "max_abs_logit_diff": diff,
                "threads": torch.get_num_threads(),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _peak_flops(device_name: str) -> float | None:
    name = device_name.lower()
    if "h100" in name and ("pcie" in name or "hbm2e" in name):
        return 756.5e12
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def bench_gpu(
    *, sizes: list[str], seq: int, iters: int, micro_batch: int | None, compile_model: bool
) -> list[dict]:
    """bf16 autocast train steps on one GPU for each size; tokens/s and MFU."""
    if not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False; the GPU mode was skipped", flush=True)
        return []
    dev_name = torch.cuda.get_device_name()
    peak = _peak_flops(dev_name)
    rows = []
    for size in sizes:
        d, h, layers, default_mb = GPU_SIZES[size]
        mb = micro_batch or default_mb
        cfg = MPTModelConfig(
            d_model=d, n_heads=h, n_layers=layers, max_seq_len=seq, attn_config=AttnConfig(attn_impl="flash")
        )
        model = build_model_on(cfg, device="cuda", init_device="cuda").train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), fused=True)
        fwd = torch.compile(model) if compile_model else model
        ids = torch.randint(0, cfg.vocab_size, (mb, seq), device="cuda")

        def step(
            fwd: torch.nn.Module = fwd, opt: torch.optim.Optimizer = opt, ids: torch.Tensor = ids
        ) -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        torch.cuda.reset_peak_memory_stats()
        t = _time_steps(step, warmup=3, iters=iters, sync=torch.cuda.synchronize)
        tps = mb * seq / t
        flops = model.flops_per_token(seq) * tps
        rows.append(
            {
                "case": size,
                "device": dev_name,
                "params": model.num_params(),
                "micro_batch": mb,
                "seq": seq,
                "tokens_per_s": round(tps),
                "mfu": None if peak is None else round(flops / peak, 4),
                "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1),
                "compile": compile_model,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        del model, opt, fwd
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--rounds", type=int, default=3, help="CPU: alternating rounds per model")
    p.add_argument("--iters", type=int, default=5, help="timed steps per round")
    p.add_argument(
        "--sizes", nargs="+", default=["mpt-125m", "mpt-350m", "mpt-1b"], choices=sorted(GPU_SIZES)
    )
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=None)
    p.add_argument("--compile", action="store_true", help="GPU: torch.compile the model")
    p.add_argument("--json", help="write the result rows to this file")
    args = p.parse_args(argv)
    if args.device == "cpu":
        rows = bench_cpu(rounds=args.rounds, iters=args.iters)
    else:
        rows = bench_gpu(
            sizes=args.sizes,
            seq=args.seq,
            iters=args.iters,
            micro_batch=args.micro_batch,
            compile_model=args.compile,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
