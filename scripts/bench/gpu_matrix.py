"""GPU speed matrix (issue 30): model sizes x {eager, compiled blocks, + fused loss, + FP8}, one JSON line each.

For each size, every configuration trains the same model (same seed, same weights) on the same learnable
synthetic batches (a seeded Markov chain over 1,024 ids of the vocabulary, so the loss falls by several nats
within 50 steps: a CPU probe, d_model 256, 4 layers, full vocabulary, went 11.8 -> 6.7 in 30 steps) with fused
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
its own line with `error`, and the next one runs. `--budget-s`: before each configuration its seconds are
estimated from the rows already measured (the slowest step time seen, scaled by FLOPs across sizes, plus the
longest compile seen, 60 s before any) and it is skipped (a `skipped` line) when it would end past the budget.
Rows carry `seconds` (wall, build to free) and `step_s` so the next run's budget can be planned, and compiled
rows `fxgraph_cache` (inductor cache hits/misses: `gpu_warm.py` fills the cache ahead of the matrix).
`--long-steps N`: at `--long-size` the fused (bf16) and fp8 configurations run N steps (their first `--steps`
losses are the loss check against eager), and a `long_run` line follows with both loss curves, the final
losses' relative difference and the FP8 / bf16 tokens/s ratio.

    python scripts/bench/gpu_matrix.py                                       # one GPU, default sizes
    python scripts/bench/gpu_matrix.py --sizes mpt-1b --long-steps 200
    python scripts/bench/gpu_matrix.py --sizes --long-steps 200 --long-size mpt-1b    # the long run only
    python scripts/bench/gpu_matrix.py --device cpu --sizes mpt-tiny --steps 6   # CPU check of the script
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

SIZES = {  # name: (d_model, n_heads, n_layers, micro batch, vocab, seq)
    "mpt-tiny": (64, 4, 2, 4, 512, 128),
    "mpt-125m": (768, 12, 12, 32, 50368, 2048),
    "mpt-350m": (1024, 16, 24, 16, 50368, 2048),
    "mpt-1b": (2048, 16, 24, 8, 50368, 2048),
    "mpt-3b": (2560, 20, 32, 4, 50368, 2048),
}


class Spec(NamedTuple):
    """A configuration: trainer.compile, model.loss_fn, trainer.fp8_recipe ("" = bf16), attn_config.attn_impl."""

    mode: str
    loss_fn: str
    fp8: str
    attn: str


CONFIGS = {
    "eager": Spec("none", "torch_crossentropy", "", "flash"),
    "compiled": Spec("blocks", "torch_crossentropy", "", "flash"),
    "fused": Spec("blocks", "chunked_crossentropy", "", "flash"),
    "liger": Spec("blocks", "liger_crossentropy", "", "flash"),
    "fp8": Spec("blocks", "chunked_crossentropy", "tensorwise", "flash"),
    "cudnn": Spec("blocks", "torch_crossentropy", "", "cudnn"),
    "fused-cudnn": Spec("blocks", "chunked_crossentropy", "", "cudnn"),
    "fp8-cudnn": Spec("blocks", "torch_crossentropy", "tensorwise", "cudnn"),
    "fp8-fused-cudnn": Spec("blocks", "chunked_crossentropy", "tensorwise", "cudnn"),
    "fp8-rowwise": Spec("blocks", "torch_crossentropy", "rowwise", "cudnn"),
}


def spec(config: str) -> Spec:
    """The `Spec` of `config`: a name of `CONFIGS`, optionally `@N` / `@xN` (a micro-batch: N, or N times the
    size's usual one: `cudnn@x2`) and optionally after `SIZE:` (only at that size: `mpt-1b:fp8-rowwise`)."""
    return CONFIGS[config.rpartition(":")[2].partition("@")[0]]


def micro_batch(size: str, config: str) -> int:
    """`config`'s micro-batch at `size`: its `@N` or `@xN` (times the usual), else the size's usual one."""
    _name, at, mb = config.rpartition(":")[2].partition("@")
    usual = SIZES[size][3]
    if not at:
        return usual
    return usual * int(mb[1:]) if mb.startswith("x") else int(mb)


def config_name(value: str) -> str:
    """argparse type: see `spec`."""
    only, _colon, rest = value.rpartition(":")
    name, at, mb = rest.partition("@")
    ok_mb = not at or (mb.removeprefix("x").isdigit() and int(mb.removeprefix("x")) >= 1)
    if name not in CONFIGS or not ok_mb or (only and only not in SIZES):
        raise argparse.ArgumentTypeError(
            f"{value!r}: use [SIZE:]NAME[@N|@xN], NAME one of {list(CONFIGS)}, SIZE one of {list(SIZES)}"
        )
    return value


def for_size(size: str, configs: list[str]) -> list[str]:
    """The configurations that run at `size` (those without `SIZE:`, and those with this size's), unprefixed."""
    out = []
    for config in configs:
        only, _colon, rest = config.rpartition(":")
        if not only or only == size:
            out.append(rest)
    return out


WARMUP = 3
LR, LR_WARMUP = 6e-4, 10
"""Peak learning rate and its linear warm-up steps. Without a warm-up (the first matrix, issue 43) Adam's first
steps at the full rate made the 125m curves spike, in bf16 as in FP8 (6.4 -> 8.7 at step 18 at micro-batch
64, bf16): the spike seen in the FP8 row was the recipe's, not FP8's."""


def batches(
    n: int, *, batch: int, seq: int, vocab: int, seed: int = 0, active: int = 1024
) -> list[torch.Tensor]:
    """`n` (batch, seq) id tensors from a seeded Markov chain over `active` ids of the vocabulary: each token
    follows its predecessor's fixed successor with probability 0.9, else a random active one. Learnable fast:
    first the unigram over the active ids (ln(vocab) -> ln(active)), then the successor table."""
    g = torch.Generator().manual_seed(seed)
    ids_used = torch.randperm(vocab, generator=g)[: min(active, vocab)]
    k = len(ids_used)
    successor = torch.randperm(k, generator=g)
    rows = n * batch
    state = torch.empty(rows, seq, dtype=torch.long)  # positions in `ids_used`
    state[:, 0] = torch.randint(0, k, (rows,), generator=g)
    noise = torch.randint(0, k, (rows, seq), generator=g)
    keep = torch.rand(rows, seq, generator=g) < 0.9
    for t in range(1, seq):
        state[:, t] = torch.where(keep[:, t], successor[state[:, t - 1]], noise[:, t])
    return list(ids_used[state].split(batch))


def flops_per_step(size: str, mb: int | None = None) -> float:
    """Approximate training FLOPs of one step at `size` (6N + attention; tied embedding) and micro-batch `mb`
    (the size's usual one by default), for estimates."""
    d, _h, layers, usual, vocab, seq = SIZES[size]
    mb = mb or usual
    return mb * seq * (6.0 * (12 * layers * d * d + vocab * d) + 12.0 * layers * d * seq)


COMPILE_GUESS_S = 60.0
"""A compiled configuration's first-step seconds before any has been measured (per-block compile, H100)."""


def estimate_s(size: str, config: str, done: list[dict[str, Any]], *, steps: int) -> float:
    """Seconds `config` at `size` should take for `steps` steps, judged from the rows `done` so far
    (conservative: the slowest step seen, FLOPs-scaled from other sizes when this one has none, the longest
    compile seen); 0 when nothing has been measured yet (then it just starts)."""
    ok = [r for r in done if "step_s" in r]
    if not ok:
        return 0.0
    same = [r for r in ok if r["case"] == size] or ok
    mine = flops_per_step(size, micro_batch(size, config))
    step = max(r["step_s"] * mine / flops_per_step(r["case"], r.get("micro_batch")) for r in same)
    compiled = spec(config).mode != "none"
    firsts = [r["first_step_s"] - r["step_s"] for r in ok if (spec(r["config"]).mode != "none") == compiled]
    first = max(firsts) if firsts else (COMPILE_GUESS_S if compiled else 0.0)
    setup = max(r["seconds"] - r["first_step_s"] - (r["steps"] - 1) * r["step_s"] for r in ok)
    return max(0.0, setup) + first + steps * step


def build(
    size: str, config: str, *, device: torch.device, layers: int | None = None, loss_fn: str | None = None
) -> tuple[Any, torch.nn.Module]:
    """The model of `size` (with `layers` blocks and `loss_fn` when given) for `config` on `device` (seeded:
    every config gets the same weights) and the module to call (compiled as the trainer would)."""
    from foundry.models import AttnConfig, MPTModelConfig, build_model_on
    from foundry.train.compile import compile_model
    from foundry.train.float8 import check_float8_device, convert_to_float8

    d, heads, n_layers, _mb, vocab, seq = SIZES[size]
    mode, usual_loss, fp8, attn_impl = spec(config)
    loss_fn = loss_fn or usual_loss
    if fp8:
        check_float8_device(device)
    attn = AttnConfig(attn_impl=attn_impl if device.type == "cuda" else "torch")
    cfg = MPTModelConfig(d_model=d, n_heads=heads, n_layers=layers or n_layers, vocab_size=vocab, max_seq_len=seq,
                         attn_config=attn, loss_fn=loss_fn, init_device="meta")  # fmt: skip
    torch.manual_seed(0)
    model = build_model_on(cfg, device=device).train()
    if fp8:
        convert_to_float8(model, recipe=fp8)
    return model, compile_model(model, mode)


def peaks(device: torch.device, config: str) -> dict[str, float]:
    """The dense peaks an MFU is given against: bf16 always, FP8 for FP8 rows (by GPU name; none on CPU)."""
    from foundry.callbacks.speed import peak_flops

    if device.type != "cuda":
        return {}
    name = torch.cuda.get_device_name(device)
    out = {"bf16": peak_flops(name, "amp_bf16")}
    if spec(config).fp8:
        out["fp8"] = peak_flops(name, "amp_fp8")
    return {k: v for k, v in out.items() if v}


def autocast(device: torch.device) -> torch.autocast:
    """bf16 autocast on CUDA; fp32 (autocast off) elsewhere."""
    cuda = device.type == "cuda"
    return torch.autocast(device.type, dtype=torch.bfloat16 if cuda else torch.float32, enabled=cuda)


def cache_counts(since: dict[str, int] | None = None) -> dict[str, int]:
    """Inductor's FX-graph cache hits and misses in this process (minus `since`): a warmed configuration
    compiles from the cache (hits, no misses)."""
    from torch._dynamo.utils import counters

    now = {k: int(counters["inductor"][f"fxgraph_cache_{k}"]) for k in ("hit", "miss")}
    return {k: v - (since or {}).get(k, 0) for k, v in now.items()}


def run(size: str, config: str, data: list[torch.Tensor], *, device: torch.device) -> dict[str, Any]:
    """Trains `len(data)` steps; the row of figures (losses every step)."""
    before = cache_counts()
    model, forward = build(size, config, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), fused=device.type == "cuda")
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    losses, first_s, start = [], 0.0, 0.0
    for step, ids in enumerate(data):
        if step in (0, WARMUP):
            sync()
            start = time.perf_counter()
        ids = ids.to(device, non_blocking=True)
        for group in opt.param_groups:
            group["lr"] = LR * min(1.0, (step + 1) / LR_WARMUP)
        with autocast(device):
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
    step_s = seconds / timed if timed > 0 else first_s
    flops = model.flops_per_token(seq) * tps
    row: dict[str, Any] = {
        "case": size,
        "config": config,
        "micro_batch": batch,
        "seq": seq,
        "steps": len(data),
        "tokens_per_s": round(tps, 1),
        "step_s": round(step_s, 4),
        "first_step_s": round(first_s, 2),
        "losses": [round(x, 5) for x in torch.stack(losses).float().tolist()],
    }
    for name, peak in peaks(device, config).items():
        row[f"mfu_vs_{name}_peak"] = round(flops / peak, 4)
        row[f"{name}_peak_tflops"] = peak / 1e12
    if cuda:
        row["peak_mem_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
    if spec(config).mode != "none":
        row["fxgraph_cache"] = cache_counts(since=before)
    del model, forward, opt
    return row


def compare(row: dict[str, Any], reference: dict[str, Any] | None) -> None:
    """Adds the loss check against `reference` (the size's eager row) to `row`."""
    if reference is None or "losses" not in reference or "losses" not in row:
        return
    if row.get("micro_batch") != reference.get("micro_batch"):  # other batches: other curves
        row["tokens_per_s_vs_eager"] = round(row["tokens_per_s"] / reference["tokens_per_s"], 3)
        return
    n = min(len(row["losses"]), len(reference["losses"]))  # the long run's rows go on past eager's steps
    a, b = row["losses"][:n], reference["losses"][:n]
    row["loss_vs_eager_max_rel_diff"] = round(max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True)), 5)
    row["final_loss_vs_eager_rel_diff"] = round(abs(a[-1] - b[-1]) / abs(b[-1]), 5)
    row["loss_check_steps"] = n
    row["tokens_per_s_vs_eager"] = round(row["tokens_per_s"] / reference["tokens_per_s"], 3)


def free(device: torch.device) -> None:
    gc.collect()
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def error_text(e: Exception) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"[:500]


def attempt(size: str, config: str, data: list[torch.Tensor], *, device: torch.device) -> dict[str, Any]:
    """`run`, or its error as a row; memory and compile caches freed either way. Every row names the device
    and torch, and its wall `seconds` (build to free)."""
    start = time.monotonic()
    try:
        row = run(size, config, data, device=device)
    except Exception as e:  # each configuration reports its own failure and the next one runs
        row = {"case": size, "config": config, "error": error_text(e)}
    free(device)
    row["seconds"] = round(time.monotonic() - start, 1)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {**row, "device": name, "torch": torch.__version__}


def skip(what: dict[str, Any], spent: float, est: float, budget: float) -> dict[str, Any] | None:
    """The `skipped` row when something estimated at `est` s, started after `spent` s, would end past `budget`."""
    if spent + est <= budget and spent < budget:
        return None
    return {**what, "skipped": f"time budget ({spent:.0f} s spent + ~{est:.0f} s estimated > {budget:.0f} s)"}


def emit(row: dict[str, Any], *, every: int = 1) -> None:
    out = dict(row)
    if "losses" in out and every > 1:
        out["losses"] = out["losses"][::every] + (
            [] if (len(out["losses"]) - 1) % every == 0 else out["losses"][-1:]
        )
    print(json.dumps(out), flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--sizes", nargs="*", default=["mpt-125m", "mpt-350m", "mpt-1b", "mpt-3b"], choices=list(SIZES),
                   help="in this order; none (just `--sizes`) with --long-steps runs the long run only")  # fmt: skip
    p.add_argument("--configs", nargs="+", default=["eager", "compiled", "fused", "fp8"], type=config_name,
                   help=f"of {list(CONFIGS)}, each optionally @MICRO_BATCH (cudnn@64)")  # fmt: skip
    p.add_argument("--steps", type=int, default=50, help="steps per configuration (the loss check's length)")
    p.add_argument("--budget-s", type=float, default=1e9, help="skip what would end after this many seconds")
    p.add_argument("--long-steps", type=int, default=0, help="N-step bf16 vs FP8 curves (0: none)")
    p.add_argument("--long-size", default="mpt-1b", choices=list(SIZES))
    p.add_argument("--long-configs", nargs=2, default=list(LONG_CONFIGS), metavar=("BF16", "FP8"), type=config_name,
                   help="the long run's bf16 and FP8 configurations")  # fmt: skip
    return p


LONG_CONFIGS = ("cudnn", "fp8-cudnn")
"""The long run's two halves by default: what `trainer.speed=auto` runs at 1b in bf16 and with FP8."""


def plan(args: argparse.Namespace) -> list[tuple[str, list[tuple[str, int]]]]:
    """(size, [(config, steps)]) in run order. With `--long-steps`, the long run's size runs its fused and fp8
    configurations for that many steps (added after the size's others when `--configs` lacks them; the size
    is added last when `--sizes` lacks it): their first `--steps` losses are the loss check against eager."""
    sizes = list(args.sizes)
    if args.long_steps and args.long_size not in sizes:
        sizes.append(args.long_size)
    out = []
    for size in sizes:
        configs = for_size(size, args.configs) if size in args.sizes else []
        if args.long_steps and size == args.long_size:
            configs += [c for c in args.long_configs if c not in configs]
        long = args.long_steps and size == args.long_size
        out.append(
            (size, [(c, max(args.steps, args.long_steps) if long and c in args.long_configs else args.steps)
                    for c in configs])
        )  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            json.dumps({"bench": "gpu_matrix", "error": "no GPU: torch.cuda.is_available() is False"}),
            flush=True,
        )
        return 1
    print(json.dumps({"bench": "gpu_matrix", "machine": machine(), "steps": args.steps,
                      "budget_s": args.budget_s}), flush=True)  # fmt: skip
    t0 = time.monotonic()
    failed = False
    done: list[dict[str, Any]] = []  # every measured row, for the estimates
    for size, configs in plan(args):
        _d, _h, _l, _mb, vocab, seq = SIZES[size]
        data: dict[int, list[torch.Tensor]] = {}  # by micro-batch: the same seeded chain
        eager: dict[str, Any] | None = None
        rows: dict[str, dict[str, Any]] = {}
        for config, steps in configs:
            est = estimate_s(size, config, done, steps=steps)
            row = skip({"case": size, "config": config}, time.monotonic() - t0, est, args.budget_s) or {}
            if row and steps > args.steps:  # the long run does not fit: the configuration's usual steps may
                steps, est = args.steps, estimate_s(size, config, done, steps=args.steps)
                row = skip({"case": size, "config": config}, time.monotonic() - t0, est, args.budget_s) or {}
            if not row:
                most, mb = max(n for _c, n in configs), micro_batch(size, config)
                if mb not in data:
                    data[mb] = batches(most, batch=mb, seq=seq, vocab=vocab)
                row = attempt(size, config, data[mb][:steps], device=device)
                if est:
                    row["estimated_s"] = round(est, 1)
                compare(row, eager)
                eager = row if config == "eager" else eager
                done.append(row)
                failed |= "error" in row and not _expected_error(row, device)
            rows[config] = row
            emit(row, every=5 if steps > 50 else 1)
        if args.long_steps and size == args.long_size:
            failed |= long_report(size, args.long_steps, rows, device=device, long_configs=args.long_configs)
    return 1 if failed else 0


def _expected_error(row: dict[str, Any], device: torch.device) -> bool:
    """An error that is a measurement, not a failure: out of memory at a larger micro-batch (`@N`: the row
    says it does not fit), or FP8 / a GPU-only kernel off the GPU."""
    if "@" in row["config"] and "OutOfMemoryError" in row["error"]:
        return True
    return device.type != "cuda" and (bool(spec(row["config"]).fp8) or row["config"] == "liger")


def long_report(
    size: str, steps: int, rows: dict[str, dict[str, Any]], *, device: torch.device, long_configs: list[str]
) -> bool:
    """The long run's line from its two rows: both loss curves (every 10th step), the final losses' relative
    difference, the FP8 / bf16 tokens/s ratio. True when the bf16 half failed (or FP8 on CUDA); a budget skip
    is no failure; a half the budget cut to the matrix's steps is reported skipped."""
    out: dict[str, Any] = {"long_run": size, "steps": steps}
    for name, config in zip(("bf16", "fp8"), long_configs, strict=True):
        row = rows.get(config, {"skipped": "not in the plan"})
        if "losses" in row and len(row["losses"]) < steps:  # the budget allowed the matrix's steps only
            row = {"skipped": f"time budget: ran {len(row['losses'])} steps, not {steps}"}
        if "skipped" in row or "error" in row:
            out[f"{name}_{'error' if 'error' in row else 'skipped'}"] = row.get("error") or row["skipped"]
        else:
            out[f"{name}_tokens_per_s"] = row["tokens_per_s"]
            out[f"{name}_first_step_s"] = row["first_step_s"]
            out[f"{name}_curve_every_10"] = row["losses"][::10] + row["losses"][-1:]
    bf16, fp8 = (rows.get(c, {}) for c in long_configs)
    if all(len(r.get("losses", ())) >= steps for r in (bf16, fp8)):
        a, b = fp8["losses"][-1], bf16["losses"][-1]
        out["final_loss_rel_diff"] = round(abs(a - b) / abs(b), 5)
        out["fp8_vs_bf16_tokens_per_s"] = round(fp8["tokens_per_s"] / bf16["tokens_per_s"], 3)
    out["device"], out["torch"] = bf16.get("device", fp8.get("device")), torch.__version__
    emit(out)
    return "error" in bf16 or ("error" in fp8 and device.type == "cuda")


if __name__ == "__main__":
    sys.exit(main())
