"""SDPA's attention kernels side by side (issue 43): causal forward + backward at each matrix size's shape.

For each size (its micro-batch, heads, head dim, seq 2048) and each backend alone (flash, cuDNN, memory-
efficient), the median milliseconds of forward + backward over `--reps` timed repetitions (CUDA events, after
warm-up), the achieved TFLOP/s (causal: half of 4·B·H·S²·hd forward, 2.5x that with backward) and the output's
norm-wise difference from the flash kernel's. One JSON line per size; a backend that cannot run the shape is
its `error`. `attn_config.attn_impl` (and `trainer.speed=auto`) chooses from these figures.

    python scripts/bench/sdpa_backends.py                      # one GPU, every matrix size
    python scripts/bench/sdpa_backends.py --device cpu --sizes mpt-tiny --reps 2   # CPU check of the script
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine
from gpu_matrix import SIZES

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


def attention_flops(batch: int, heads: int, seq: int, head_dim: int) -> float:
    """Causal forward + backward FLOPs: forward 4·B·H·S²·hd halved by the mask; backward 2.5x forward."""
    return 3.5 * 4 * batch * heads * seq * seq * head_dim / 2


def time_backend(
    backend: SDPBackend, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, reps: int
) -> tuple[float, torch.Tensor]:
    """Median milliseconds of one forward + backward under `backend` alone, and its output."""
    cuda = q.device.type == "cuda"
    times = []
    out = q
    for i in range(reps + 2):  # 2 warm-ups
        for t in (q, k, v):
            t.grad = None
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(torch.ones_like(out))
        if cuda:
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
        else:
            ms = (time.perf_counter() - t0) * 1e3
        if i >= 2:
            times.append(ms)
    return sorted(times)[len(times) // 2], out.detach()


def measure(size: str, *, device: torch.device, backends: list[str], reps: int) -> dict[str, Any]:
    d, heads, _layers, mb, _vocab, seq = SIZES[size]
    hd = d // heads
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(mb, heads, seq, hd, generator=g).to(device, dtype).requires_grad_() for _ in range(3)
    )
    row: dict[str, Any] = {"case": size, "shape": [mb, heads, seq, hd], "dtype": str(dtype)}
    flops = attention_flops(mb, heads, seq, hd)
    ref = None
    for name in backends:
        try:
            ms, out = time_backend(BACKENDS[name], q, k, v, reps=reps)
        except RuntimeError as e:  # the backend cannot serve this shape / device
            row[name] = {"error": str(e).strip().splitlines()[0][:200]}
            continue
        entry = {"ms": round(ms, 3), "tflops": round(flops / ms / 1e9, 1)}
        if ref is None:
            ref = out
        else:
            entry["rel_diff_vs_first"] = round(
                ((out.float() - ref.float()).norm() / ref.float().norm()).item(), 5
            )
        row[name] = entry
    timed = {n: r["ms"] for n, r in row.items() if isinstance(r, dict) and "ms" in r}
    if timed:
        row["fastest"] = min(timed, key=timed.__getitem__)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument(
        "--sizes", nargs="+", default=["mpt-125m", "mpt-350m", "mpt-1b", "mpt-3b"], choices=list(SIZES)
    )
    p.add_argument("--backends", nargs="+", default=["flash", "cudnn", "efficient"], choices=list(BACKENDS))
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    print(
        json.dumps({"bench": "sdpa_backends", "machine": machine(), "torch": torch.__version__}), flush=True
    )
    for size in args.sizes:
        print(json.dumps(measure(size, device=device, backends=args.backends, reps=args.reps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
