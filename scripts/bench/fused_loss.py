"""Peak memory and time of the training loss: full logits + cross-entropy vs the chunked fused loss.

One JSON line per loss function, each measured in its own process (so one's peak cannot hide the other's):
the unembedding + next-token loss + backward of (batch x seq) hidden states against a vocabulary of 50,368
(mpt-125m's head: d_model 768), as `model.loss_fn=torch_crossentropy` and `=chunked_crossentropy` run it.
Peak memory: on CUDA `torch.cuda.max_memory_allocated` above what was allocated before the loss; on CPU the
process's peak resident set above its level before the loss (Linux `ru_maxrss`). Also the loss and gradient
differences between the two (same inputs, seeded).

    python scripts/bench/fused_loss.py                      # CPU, 4 x 1024 tokens
    python scripts/bench/fused_loss.py --device cuda --batch 16 --seq 2048 --dtype bf16
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

LOSS_FNS = ("torch_crossentropy", "chunked_crossentropy")


def _inputs(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.batch, args.seq, args.d_model, generator=g) * 0.5
    weight = torch.randn(args.vocab, args.d_model, generator=g) * 0.02
    labels = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    dev = torch.device(args.device)
    return hidden.to(dev).requires_grad_(), weight.to(dev).requires_grad_(), labels.to(dev)


def _loss(name: str, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    from foundry.models.mpt.loss import chunked_linear_cross_entropy, shifted_cross_entropy

    if name == "chunked_crossentropy":
        return chunked_linear_cross_entropy(hidden, weight, labels)
    return shifted_cross_entropy(torch.nn.functional.linear(hidden, weight), labels)


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
    for _ in range(args.iters):
        hidden.grad = weight.grad = None
        sync()
        start = time.perf_counter()
        with torch.autocast(args.device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = _loss(args.loss_fn, hidden, weight, labels)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=50368)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--loss-fn", choices=LOSS_FNS, help=argparse.SUPPRESS)  # the child's job
    parser.add_argument("--save", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loss_fn:
        print(json.dumps(measure(args)), flush=True)
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False; nothing measured", flush=True)
        return
    rows, saved = {}, {}
    for name in LOSS_FNS:
        out = Path(f"/tmp/fused_loss_{name}.pt")
        child = [*sys.argv[1:], "--loss-fn", name, "--save", str(out)]
        proc = subprocess.run([sys.executable, __file__, *child], capture_output=True, text=True, check=True)
        rows[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        saved[name] = torch.load(out)
        out.unlink()
    plain, chunked = saved["torch_crossentropy"], saved["chunked_crossentropy"]
    tokens = args.batch * args.seq
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
                "machine": machine(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
