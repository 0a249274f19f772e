"""Trainer overhead: tokens/s of `foundry.train.Trainer` vs a bare PyTorch loop (same model, data, batch).

CPU (default): an MPT small enough for CPU, runs alternated (bare, trainer, bare, ...), median reported,
plus the converter's tokens/s on the quick-start corpus. `--gpu`: trainer tokens/s and MFU for mpt-125m
and mpt-1b at seq 2048 in bf16 (llm-foundry's H100 table: 1b at 41.8% MFU). Prints one JSON object per line.
`--compile blocks --loss-fn chunked_crossentropy [--precision amp_fp8]` gives both sides the same speed options
(issue 30: the trainer keeps >= 0.97 of the bare compiled loop).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def _model(
    name: str, *, seq: int, device: torch.device, loss_fn: str = "torch_crossentropy", fp8: bool = False
) -> torch.nn.Module:
    from foundry.models import MPTModelConfig, build_model_on
    from foundry.train.float8 import convert_to_float8

    dims = {
        "cpu-small": {"d_model": 128, "n_heads": 4, "n_layers": 4, "vocab_size": 2048},
        "mpt-125m": {"d_model": 768, "n_heads": 12, "n_layers": 12, "vocab_size": 50368},
        "mpt-1b": {"d_model": 2048, "n_heads": 16, "n_layers": 24, "vocab_size": 50368},
    }[name]
    cfg = MPTModelConfig(max_seq_len=seq, init_device="meta", loss_fn=loss_fn, **dims)
    cfg.attn_config.attn_impl = "flash" if device.type == "cuda" else "torch"
    torch.manual_seed(0)
    model = build_model_on(cfg, device=device)
    if fp8:
        convert_to_float8(model)
    return model


def _batches(n: int, *, bs: int, seq: int, vocab: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (bs, seq), generator=g)
        out.append({"input_ids": ids, "labels": ids.clone()})
    return out


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    from foundry.optim import DecoupledAdamWConfig, build_optimizer

    return build_optimizer(DecoupledAdamWConfig(lr=1e-4), model=model)


def bare_loop(
    model: torch.nn.Module, batches: list, *, device: torch.device, precision: str, compile_mode: str = "none"
) -> float:
    """Tokens/s of the plainest correct loop: forward, backward, clip, step, zero_grad."""
    from foundry.train.compile import compile_model

    opt = _optimizer(model)
    forward = compile_model(model, compile_mode)
    dtype = torch.bfloat16 if precision in ("amp_bf16", "amp_fp8") else None
    tokens, start = 0, None
    for i, batch in enumerate(batches):
        if i == 2:  # warm-up steps excluded
            _sync(device)
            start, tokens = time.perf_counter(), 0
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = forward(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss.detach())  # the trainer logs the loss every step, so the bare loop syncs too
        tokens += batch["input_ids"].numel()
    _sync(device)
    return tokens / (time.perf_counter() - start)


def trainer_loop(
    model: torch.nn.Module,
    batches: list,
    *,
    device: torch.device,
    precision: str,
    microbatch: int | str,
    compile_mode: str = "none",
) -> tuple[float, dict]:
    """Tokens/s of the Trainer (speed + LR callbacks on, no loggers), timed the same way; and its last metrics."""
    from foundry.callbacks import LRMonitor, SpeedMonitor, SpeedMonitorConfig
    from foundry.train.batching import plan_batches
    from foundry.train.config import TrainerConfig
    from foundry.train.loop import Trainer

    bs, seq = batches[0]["input_ids"].shape
    cfg = TrainerConfig(global_train_batch_size=bs, device_train_microbatch_size=microbatch, precision=precision,
                        device=device.type, progress_bar=False, grad_clip_norm=1.0, compile=compile_mode)  # fmt: skip
    tr = Trainer(model=model, optimizer=_optimizer(model), scheduler=None, train_loader=batches[:2],
                 eval_loader=None, cfg=cfg, plan=plan_batches(global_batch_size=bs, world_size=1, microbatch=microbatch),
                 max_steps=2, eval_interval_steps=0, max_seq_len=seq, device=device,
                 callbacks=[SpeedMonitor(SpeedMonitorConfig(window_size=len(batches)), world_size=1), LRMonitor()])  # fmt: skip
    tr.fit()  # warm-up (2 steps), like the bare loop
    tr.train_loader, tr._iter, tr.max_steps = batches[2:], None, 2 + len(batches) - 2
    tr.evaluate = lambda: {}  # no eval split here
    _sync(device)
    start = time.perf_counter()
    metrics = tr.fit()
    _sync(device)
    return (len(batches) - 2) * bs * seq / (time.perf_counter() - start), metrics


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cpu_bench(reps: int, steps: int) -> None:
    device = torch.device("cpu")
    seq, bs = 128, 16
    batches = _batches(steps + 2, bs=bs, seq=seq, vocab=2048)
    bare, ours = [], []
    for _ in range(reps):
        bare.append(
            bare_loop(_model("cpu-small", seq=seq, device=device), batches, device=device, precision="fp32")
        )
        ours.append(trainer_loop(_model("cpu-small", seq=seq, device=device), batches, device=device,
                                 precision="fp32", microbatch=bs)[0])  # fmt: skip
    b, t = statistics.median(bare), statistics.median(ours)
    print(json.dumps({"bench": "trainer_overhead_cpu", "model": "mpt d128 L4 vocab2048", "seq": seq, "batch": bs,
                      "steps": steps, "reps": reps, "threads": torch.get_num_threads(),
                      "bare_tokens_per_sec": round(b), "trainer_tokens_per_sec": round(t),
                      "ratio": round(t / b, 4), "bare_all": [round(x) for x in bare],
                      "trainer_all": [round(x) for x in ours]}), flush=True)  # fmt: skip


def converter_bench() -> None:
    import tempfile
    from pathlib import Path

    from foundry.data.prep import convert_texts
    from foundry.data.quickstart import quickstart_corpus, train_bpe_tokenizer
    from foundry.tokenizers import TokenizerConfig, build_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        docs = quickstart_corpus(4_000_000)
        train_bpe_tokenizer(docs, vocab_size=512, path=Path(tmp) / "tok.json")
        tok = build_tokenizer(TokenizerConfig(name=str(Path(tmp) / "tok.json")))
        for workers in (1, 2):
            stats = convert_texts(docs, tokenizer=tok, out=f"{tmp}/mds{workers}", max_seq_len=2048,
                                  eos_text="<|endoftext|>", num_workers=workers)  # fmt: skip
            print(json.dumps({"bench": "converter", "corpus_chars": 4_000_000, "num_workers": workers,
                              "tokens": stats.tokens, "seconds": round(stats.seconds, 3),
                              "tokens_per_sec": round(stats.tokens_per_second)}), flush=True)  # fmt: skip


def gpu_bench(steps: int, *, models: list[str], compile_mode: str, loss_fn: str, precision: str) -> None:
    device = torch.device("cuda")
    seq = 2048
    sizes = {
        "mpt-125m": 32,
        "mpt-1b": 8,
    }  # the bare loop runs each batch whole: 1b at 16 x 2048 OOMs on 80 GB
    fp8 = precision == "amp_fp8"
    for name in models:
        bs = sizes[name]
        torch._dynamo.reset()
        model = _model(name, seq=seq, device=device, loss_fn=loss_fn, fp8=fp8)
        batches = _batches(steps + 2, bs=bs, seq=seq, vocab=50368)
        bare = bare_loop(model, batches, device=device, precision=precision, compile_mode=compile_mode)
        del model
        torch.cuda.empty_cache()
        model = _model(name, seq=seq, device=device, loss_fn=loss_fn, fp8=fp8)
        tps, metrics = trainer_loop(model, batches, device=device, precision=precision, microbatch="auto",
                                    compile_mode=compile_mode)  # fmt: skip
        print(json.dumps({"bench": "trainer_gpu", "model": name, "gpu": torch.cuda.get_device_name(), "seq": seq,
                          "compile": compile_mode, "loss_fn": loss_fn, "precision": precision,
                          "batch": bs, "microbatch": int(metrics["trainer/device_train_microbatch_size"]),
                          "bare_tokens_per_sec": round(bare), "trainer_tokens_per_sec": round(tps),
                          "ratio": round(tps / bare, 4), "mfu": metrics.get("throughput/device/mfu"),
                          "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 1)}), flush=True)  # fmt: skip
        del model
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--gpu", action="store_true", help="mpt-125m / mpt-1b on CUDA, seq 2048, bf16")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--skip_converter", action="store_true")
    p.add_argument("--models", nargs="+", default=["mpt-125m", "mpt-1b"], choices=["mpt-125m", "mpt-1b"])
    p.add_argument("--compile", default="none", choices=["none", "model", "blocks"], help="--gpu: both loops")
    p.add_argument("--loss-fn", default="torch_crossentropy", help="--gpu: model.loss_fn of both")
    p.add_argument(
        "--precision", default="amp_bf16", choices=["amp_bf16", "amp_fp8"], help="--gpu: both loops"
    )
    return p


def main() -> None:
    args = parser().parse_args()
    if args.gpu:
        gpu_bench(args.steps, models=args.models, compile_mode=args.compile, loss_fn=args.loss_fn,
                  precision=args.precision)  # fmt: skip
        return
    cpu_bench(args.reps, args.steps)
    if not args.skip_converter:
        converter_bench()


if __name__ == "__main__":
    main()
