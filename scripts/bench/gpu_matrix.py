"""GPU speed matrix (issue 30): model sizes x {eager, compiled blocks, + fused loss, + FP8}, one JSON line each.

For each size, every configuration trains the same model (same seed, same weights) on the same learnable
synthetic batches (a seeded Markov chain over the vocabulary: the loss falls well within 50 steps) with fused
AdamW under bf16 autocast (fp32 on CPU) and reports: tokens/s over the steps after the warm-up (compilation
happens in step 0), MFU against the peak of its precision (the bf16 peak, and for FP8 rows also the FP8 peak,
both named), peak memory, the first step's seconds (compile), the losses, and the largest relative difference
from that size's eager curve. Configurations:

    eager     torch_crossentropy, no compile            (the reference)
    compiled  trainer.compile=blocks
    fused     + model.loss_fn=chunked_crossentropy
    liger     trainer.compile=blocks + model.loss_fn=liger_crossentropy (liger-kernel, CUDA)
    fp8       + trainer.precision=amp_fp8 (compiled, chunked loss, torchao Float8Linear in the blocks)

Each configuration runs in a try block: an error (no FP8 on this device, out of memory, a compile failure) is
its own line with `error`, and the next one runs. `--budget-s` skips what would not fit (a `skipped` line).
`--long-steps N` adds an N-step bf16 (fused) vs FP8 run at `--long-size`: both loss curves, the final losses'
relative difference and the FP8 / bf16 tokens/s ratio.

    python scripts/bench/gpu_matrix.py                                       # one GPU, default sizes
    python scripts/bench/gpu_matrix.py --sizes mpt-1b --long-steps 200
    python scripts/bench/gpu_matrix.py --device cpu --sizes mpt-tiny --steps 6   # CPU check of the script
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

SIZES = {  # name: (d_model, n_heads, n_layers, micro batch, vocab, seq)
    "mpt-tiny": (64, 4, 2, 4, 512, 128),
    "mpt-125m": (768, 12, 12, 32, 50368, 2048),
    "mpt-350m": (1024, 16, 24, 16, 50368, 2048),
    "mpt-1b": (2048, 16, 24, 8, 50368, 2048),
    "mpt-3b": (2560, 20, 32, 4, 50368, 2048),
}
CONFIGS = {  # name: (trainer.compile, model.loss_fn, fp8)
    "eager": ("none", "torch_crossentropy", False),
    "compiled": ("blocks", "torch_crossentropy", False),
    "fused": ("blocks", "chunked_crossentropy", False),
    "liger": ("blocks", "liger_crossentropy", False),
    "fp8": ("blocks", "chunked_crossentropy", True),
}
WARMUP = 3


def batches(n: int, *, batch: int, seq: int, vocab: int, seed: int = 0) -> list[torch.Tensor]:
    """`n` (batch, seq) id tensors from a seeded Markov chain: each token follows its predecessor's fixed
    successor with probability 0.9, else a random one (learnable, so the loss falls fast)."""
    g = torch.Generator().manual_seed(seed)
    successor = torch.randperm(vocab, generator=g)
    out = []
    for _ in range(n):
        ids = torch.empty(batch, seq, dtype=torch.long)
        ids[:, 0] = torch.randint(0, vocab, (batch,), generator=g)
        noise = torch.randint(0, vocab, (batch, seq), generator=g)
        keep = torch.rand(batch, seq, generator=g) < 0.9
        for t in range(1, seq):
            ids[:, t] = torch.where(keep[:, t], successor[ids[:, t - 1]], noise[:, t])
        out.append(ids)
    return out


def build(size: str, config: str, *, device: torch.device) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The model of `size` for `config` on `device` (seeded: every config gets the same weights) and the
    module to call (compiled as the trainer would)."""
    from foundry.models import AttnConfig, MPTModelConfig, build_model_on
    from foundry.train.compile import compile_model
    from foundry.train.float8 import check_float8_device, convert_to_float8

    d, heads, layers, _mb, vocab, seq = SIZES[size]
    mode, loss_fn, fp8 = CONFIGS[config]
    if fp8:
        check_float8_device(device)
    attn = AttnConfig(attn_impl="flash" if device.type == "cuda" else "torch")
    cfg = MPTModelConfig(d_model=d, n_heads=heads, n_layers=layers, vocab_size=vocab, max_seq_len=seq,
                         attn_config=attn, loss_fn=loss_fn, init_device="meta")  # fmt: skip
    torch.manual_seed(0)
    model = build_model_on(cfg, device=device).train()
    if fp8:
        convert_to_float8(model)
    return model, compile_model(model, mode)


def peaks(device: torch.device, config: str) -> dict[str, float]:
    """The dense peaks an MFU is given against: bf16 always, FP8 for FP8 rows (by GPU name; none on CPU)."""
    from foundry.callbacks.speed import peak_flops

    if device.type != "cuda":
        return {}
    name = torch.cuda.get_device_name(device)
    out = {"bf16": peak_flops(name, "amp_bf16")}
    if CONFIGS[config][2]:
        out["fp8"] = peak_flops(name, "amp_fp8")
    return {k: v for k, v in out.items() if v}


def run(size: str, config: str, data: list[torch.Tensor], *, device: torch.device) -> dict[str, Any]:
    """Trains `len(data)` steps; the row of figures (losses every step)."""
    model, forward = build(size, config, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), fused=device.type == "cuda")
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    losses, first_s, start = [], 0.0, 0.0
    for step, ids in enumerate(data):
        if step in (0, WARMUP):
            sync()
            start = time.perf_counter()
        ids = ids.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=dtype, enabled=cuda):
            loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if step == 0:
            sync()
            first_s = time.perf_counter() - start
    sync()
    timed = len(data) - WARMUP
    seconds = time.perf_counter() - start
    batch, seq = data[0].shape
    tps = batch * seq * timed / seconds if timed > 0 else float("nan")
    flops = model.flops_per_token(seq) * tps
    row: dict[str, Any] = {
        "case": size,
        "config": config,
        "micro_batch": batch,
        "seq": seq,
        "steps": len(data),
        "tokens_per_s": round(tps, 1),
        "first_step_s": round(first_s, 2),
        "losses": [round(x, 5) for x in torch.stack(losses).float().tolist()],
    }
    for name, peak in peaks(device, config).items():
        row[f"mfu_vs_{name}_peak"] = round(flops / peak, 4)
        row[f"{name}_peak_tflops"] = peak / 1e12
    if cuda:
        row["peak_mem_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
    del model, forward, opt
    return row


def compare(row: dict[str, Any], reference: dict[str, Any] | None) -> None:
    """Adds the loss check against `reference` (the size's eager row) to `row`."""
    if reference is None or "losses" not in reference or "losses" not in row:
        return
    a, b = row["losses"], reference["losses"]
    row["loss_vs_eager_max_rel_diff"] = round(max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True)), 5)
    row["final_loss_vs_eager_rel_diff"] = round(abs(a[-1] - b[-1]) / abs(b[-1]), 5)
    row["tokens_per_s_vs_eager"] = round(row["tokens_per_s"] / reference["tokens_per_s"], 3)


def _free(device: torch.device) -> None:
    gc.collect()
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def attempt(size: str, config: str, data: list[torch.Tensor], *, device: torch.device) -> dict[str, Any]:
    """`run`, or its error as a row; memory and compile caches freed either way."""
    try:
        return run(size, config, data, device=device)
    except Exception as e:  # noqa: BLE001 - each configuration reports its own failure and the next one runs
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return {"case": size, "config": config, "error": f"{type(e).__name__}: {first}"[:500]}
    finally:
        _free(device)


def emit(row: dict[str, Any], *, every: int = 1) -> None:
    out = dict(row)
    if "losses" in out and every > 1:
        out["losses"] = out["losses"][::every] + (
            [] if (len(out["losses"]) - 1) % every == 0 else out["losses"][-1:]
        )
    print(json.dumps(out), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument(
        "--sizes", nargs="+", default=["mpt-125m", "mpt-350m", "mpt-1b", "mpt-3b"], choices=list(SIZES)
    )
    p.add_argument(
        "--configs", nargs="+", default=["eager", "compiled", "fused", "fp8"], choices=list(CONFIGS)
    )
    p.add_argument("--steps", type=int, default=50, help="steps per configuration (the loss check's length)")
    p.add_argument(
        "--budget-s", type=float, default=1e9, help="skip what would start after this many seconds"
    )
    p.add_argument("--long-steps", type=int, default=0, help="N-step bf16 vs FP8 curves (0: none)")
    p.add_argument("--long-size", default="mpt-1b", choices=list(SIZES))
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            json.dumps({"bench": "gpu_matrix", "error": "no GPU: torch.cuda.is_available() is False"}),
            flush=True,
        )
        return 1
    print(json.dumps({"bench": "gpu_matrix", "machine": machine(), "steps": args.steps}), flush=True)
    t0 = time.monotonic()
    failed = False
    for size in args.sizes:
        _d, _h, _l, mb, vocab, seq = SIZES[size]
        data = batches(args.steps, batch=mb, seq=seq, vocab=vocab)
        rows: dict[str, dict[str, Any]] = {}
        for config in args.configs:
            spent = time.monotonic() - t0
            if spent > args.budget_s:
                emit(
                    {
                        "case": size,
                        "config": config,
                        "skipped": f"time budget ({spent:.0f} s of {args.budget_s:.0f})",
                    }
                )
                continue
            row = attempt(size, config, data, device=device)
            compare(row, rows.get("eager"))
            rows[config] = row
            failed |= "error" in row and (device.type == "cuda" or config in ("eager", "compiled", "fused"))
            emit(row, every=5 if args.steps > 20 else 1)
    if args.long_steps:
        failed |= long_run(args, device=device, t0=t0)
    return 1 if failed else 0


def long_run(args: argparse.Namespace, *, device: torch.device, t0: float) -> bool:
    """bf16 (compiled + fused) vs FP8 for `--long-steps` at `--long-size`; True when either failed."""
    size = args.long_size
    _d, _h, _l, mb, vocab, seq = SIZES[size]
    spent = time.monotonic() - t0
    if spent > args.budget_s:
        emit({"long_run": size, "skipped": f"time budget ({spent:.0f} s of {args.budget_s:.0f})"})
        return False
    data = batches(args.long_steps, batch=mb, seq=seq, vocab=vocab, seed=1)
    bf16 = attempt(size, "fused", data, device=device)
    fp8 = attempt(size, "fp8", data, device=device)
    out: dict[str, Any] = {"long_run": size, "steps": args.long_steps}
    for name, row in (("bf16", bf16), ("fp8", fp8)):
        if "error" in row:
            out[f"{name}_error"] = row["error"]
        else:
            out[f"{name}_tokens_per_s"] = row["tokens_per_s"]
            out[f"{name}_curve_every_10"] = row["losses"][::10] + row["losses"][-1:]
    if "error" not in bf16 and "error" not in fp8:
        a, b = fp8["losses"][-1], bf16["losses"][-1]
        out["final_loss_rel_diff"] = round(abs(a - b) / abs(b), 5)
        out["fp8_vs_bf16_tokens_per_s"] = round(fp8["tokens_per_s"] / bf16["tokens_per_s"], 3)
    emit(out)
    return "error" in bf16 or ("error" in fp8 and device.type == "cuda")


if __name__ == "__main__":
    sys.exit(main())
