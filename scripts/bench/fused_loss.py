"""Peak memory and time of the training loss: full logits + cross-entropy vs the chunked fused loss.

One JSON line per loss function, each measured in its own process (so one's peak cannot hide the other's):
the unembedding + next-token loss + backward of (batch x seq) hidden states against a vocabulary of 50,368
(mpt-125m's head: d_model 768), as `model.loss_fn=torch_crossentropy` and `=chunked_crossentropy` run it.
Peak memory: on CUDA `torch.cuda.max_memory_allocated` above what was allocated before the loss; on CPU the
process's peak resident set above its level before the loss (Linux `ru_maxrss`). Also the loss and gradient
differences between the two (same inputs, seeded). `--compile` adds both with their loss math compiled as
`trainer.compile=blocks` compiles it (`torch.compile` of the plain cross-entropy / of the chunked loss's
per-chunk `chunk_loss_and_grad`; seconds exclude the first iteration, which compiles).

    python scripts/bench/fused_loss.py                      # CPU, 4 x 1024 tokens
    python scripts/bench/fused_loss.py --device cuda --batch 16 --seq 2048 --dtype bf16 --compile
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

LOSS_FNS = ("torch_crossentropy", "chunked_crossentropy")
COMPILED = "+compile"


def _inputs(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.batch, args.seq, args.d_model, generator=g) * 0.5
    weight = torch.randn(args.vocab, args.d_model, generator=g) * 0.02
    labels = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    dev = torch.device(args.device)
    return hidden.to(dev).requires_grad_(), weight.to(dev).requires_grad_(), labels.to(dev)


def _loss(variant: str) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """(hidden, weight, labels) -> loss for `variant`: a `LOSS_FNS` name, `+compile` for its math compiled."""
    from foundry.models.mpt.loss import (
        chunk_loss_and_grad,
        chunked_linear_cross_entropy,
        shifted_cross_entropy,
    )

    name, compiled = variant.removesuffix(COMPILED), variant.endswith(COMPILED)
    if name == "chunked_crossentropy":
        chunk_fn = torch.compile(chunk_loss_and_grad) if compiled else None
        return lambda h, w, y: chunked_linear_cross_entropy(h, w, y, chunk_fn=chunk_fn)
    ce = torch.compile(shifted_cross_entropy) if compiled else shifted_cross_entropy
    return lambda h, w, y: ce(torch.nn.functional.linear(h, w), y)


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(args: argparse.Namespace) -> dict:
    """One loss function in this process: peak memory above the inputs, seconds per loss+backward."""
    hidden, weight, labels = _inputs(args)
    cuda = args.device == "cuda"
    dtype = {"fp32": None, "bf16": torch.bfloat16}[args.dtype]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_bytes()
    times = []
    loss_fn = _loss(args.loss_fn)
    for _ in range(args.iters):
        hidden.grad = weight.grad = None
        sync()
        start = time.perf_counter()
        with torch.autocast(args.device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(hidden, weight, labels)
        loss.backward()
        sync()
        times.append(time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated() if cuda else _rss_bytes()) - base
    grads = {"hidden": hidden.grad.float().cpu(), "weight": weight.grad.float().cpu()}
    torch.save({"loss": loss.detach().float().cpu(), **grads}, args.save)
    return {
        "loss_fn": args.loss_fn,
        "peak_mb": round(peak / 2**20, 1),
        "seconds": round(min(times[1:] or times), 4),
        "loss": round(loss.item(), 6),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50368)
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="also both losses with their math compiled")
    p.add_argument("--loss-fn", help=argparse.SUPPRESS)  # the child's job: a variant
    p.add_argument("--save", help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = parser().parse_args()
    if args.loss_fn:
        print(json.dumps(measure(args)), flush=True)
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False; nothing measured", flush=True)
        return
    rows, saved = {}, {}
    variants = [*LOSS_FNS, *(f"{n}{COMPILED}" for n in LOSS_FNS if args.compile)]
    for name in variants:
        out = Path(f"/tmp/fused_loss_{name}.pt")
        child = [*sys.argv[1:], "--loss-fn", name, "--save", str(out)]
        proc = subprocess.run([sys.executable, __file__, *child], capture_output=True, text=True, check=True)
        rows[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        saved[name] = torch.load(out)
        out.unlink()
    plain, chunked = saved["torch_crossentropy"], saved["chunked_crossentropy"]
    tokens = args.batch * args.seq
    extra = {}
    for name in LOSS_FNS if args.compile else ():
        row, eager = rows[f"{name}{COMPILED}"], rows[name]
        key = "plain" if name == "torch_crossentropy" else "chunked"
        diff = (saved[f"{name}{COMPILED}"]["loss"] - plain["loss"]).abs().item()
        extra[f"{key}_compiled"] = {**row, "seconds_vs_eager": round(row["seconds"] / eager["seconds"], 3),
                                    "peak_vs_eager": round(row["peak_mb"] / max(eager["peak_mb"], 0.1), 3),
                                    "loss_abs_diff_vs_plain": diff}  # fmt: skip
    print(
        json.dumps(
            {
                "bench": "fused_loss",
                "device": args.device,
                "dtype": args.dtype,
                "tokens": tokens,
                "vocab": args.vocab,
                "d_model": args.d_model,
                "logits_fp32_mb": round(tokens * args.vocab * 4 / 2**20, 1),
                "plain": rows["torch_crossentropy"],
                "chunked": rows["chunked_crossentropy"],
                "peak_ratio": round(
                    rows["chunked_crossentropy"]["peak_mb"] / rows["torch_crossentropy"]["peak_mb"], 3
                ),
                "loss_abs_diff": (plain["loss"] - chunked["loss"]).abs().item(),
                "grad_max_abs_diff": max(
                    (plain[k] - chunked[k]).abs().max().item() for k in ("hidden", "weight")
                ),
                **extra,
                "machine": machine(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
