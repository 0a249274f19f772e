"""Finetuning throughput: loss-generating tokens/s, ours packed vs ours padded vs llm-foundry (CPU by default).

    python scripts/bench/finetune_throughput.py [--steps 20] [--device cpu|cuda] [--no-llmfoundry]

Every case finetunes the same MPT (d_model 128, 4 layers, vocab 512, torch attention on CPU) for the same
number of optimizer steps (AdamW, one microbatch of `--batch` rows of `--max-seq-len` tokens) on the same
prompt/response rows, tokenized by the same byte-level BPE tokenizer (512 tokens, trained on the
quick-start corpus); only the data path and the model code differ:
- `ours-packed`: `build_finetune_dataloader` with `packing_ratio: auto`, model masking by sequence id;
- `ours-padded`: the same loader unpacked (one example per row, padded to max_seq_len: llm-foundry's default);
- `llmfoundry-padded` / `llmfoundry-packed`: llm-foundry's `build_finetuning_dataloader` (packing_ratio null
  / auto) and `ComposerMPTCausalLM`, run by its own venv (`--llmfoundry-python`) as a child process.
Each case runs in its own process (so peak RSS is its own) and prints one JSON line: loss tokens/s (label
tokens that are not -100, i.e. response tokens, over the timed steps' wall time, after `--warmup` steps),
all tokens/s, rows filled, peak memory (RSS on CPU, max allocated on CUDA). The data (stated in each line):
`--examples` rows whose prompt and response lengths in words are log-normal (medians 12 and 20 words,
sigma 0.9, capped at 700: ~150 tokens on average with a long tail, padded rows ~30% full), 512-token rows, like
dolly_hhrlhf's (a few hundred tokens, long-tailed) relative to its 2048-token rows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
DIMS = {"d_model": 128, "n_heads": 4, "n_layers": 4, "expansion_ratio": 4, "vocab_size": 512}
WORDS = (
    "time person year way day thing man world life hand part child eye woman place work week case point "
    "government company number group problem fact model data train loss token answer question python "
    "module function value list string return error file line class object method system result"
).split()
DATASET = "lognormal words: prompt median 12, response median 20, sigma 0.9, cap 700"


def _length(rng: random.Random, median: float) -> int:
    return max(1, min(700, int(math.exp(rng.gauss(math.log(median), 0.9)))))


def write_data(root: Path, *, examples: int, seed: int = 0) -> None:
    """`root/train.jsonl` (prompt/response rows) and `root/tokenizer.json` (512-token byte-level BPE)."""
    from foundry.data.quickstart import quickstart_corpus, train_bpe_tokenizer

    rng = random.Random(seed)
    with open(root / "train.jsonl", "w", encoding="utf-8") as f:
        for _ in range(examples):
            prompt = " ".join(rng.choice(WORDS) for _ in range(_length(rng, 12)))
            response = " ".join(rng.choice(WORDS) for _ in range(_length(rng, 20)))
            f.write(json.dumps({"prompt": f"{prompt}\n", "response": response}) + "\n")
    train_bpe_tokenizer(quickstart_corpus(1_000_000), vocab_size=512, path=root / "tokenizer.json")


def _tokenizer(root: Path) -> Any:
    from transformers import PreTrainedTokenizerFast

    eos = "<|endoftext|>"
    return PreTrainedTokenizerFast(
        tokenizer_file=str(root / "tokenizer.json"), bos_token=eos, eos_token=eos, unk_token=eos
    )


def _peak_mb(device: str) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed_loop(step, batches, *, device: str, warmup: int, steps: int) -> dict[str, float]:  # noqa: ANN001
    """Runs `step(batch)` on `warmup + steps` batches; times the last `steps` (data loading included)."""
    import torch

    it = iter(batches)
    for _ in range(warmup):
        step(next(it))
    if device == "cuda":
        torch.cuda.synchronize()
    loss_tokens = tokens = rows_filled = 0
    t0 = time.perf_counter()
    for _ in range(steps):
        batch = next(it)
        labels = batch["labels"]
        loss_tokens += int((labels != -100).sum())
        tokens += int(batch["attention_mask"].sum())
        rows_filled += labels.numel()
        step(batch)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {
        "loss_tokens_per_s": loss_tokens / seconds,
        "tokens_per_s": tokens / seconds,
        "fill": tokens / rows_filled,
        "seconds": seconds,
    }


def _cycle(loader):  # noqa: ANN001
    while True:
        yield from loader


def run_ours(root: Path, *, packed: bool, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from foundry.data.finetune import FinetuneDataConfig, build_finetune_dataloader
    from foundry.models import MPTModelConfig, build_model_on
    from streaming.reader.world import World

    torch.manual_seed(0)
    data = FinetuneDataConfig(hf_name=str(root / "train.jsonl"), packing_ratio="auto" if packed else None)
    loader = build_finetune_dataloader(
        data, tokenizer=_tokenizer(root), device_batch_size=args.batch, world=World(), split="train",
        max_seq_len=args.max_seq_len, seed=0,
    )  # fmt: skip
    cfg = MPTModelConfig(max_seq_len=args.max_seq_len, init_device="cpu", **DIMS)
    cfg.attn_config.attn_impl = "flash" if args.device == "cuda" else "torch"
    cfg.attn_config.attn_uses_sequence_id = packed
    model = build_model_on(cfg, device=torch.device(args.device))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32

    def step(batch: dict[str, torch.Tensor]) -> None:
        batch = {k: v.to(args.device) for k, v in batch.items()}
        with torch.autocast(args.device, dtype=dtype, enabled=args.device == "cuda"):
            loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    out = _timed_loop(step, _cycle(loader), device=args.device, warmup=args.warmup, steps=args.steps)
    return {**out, "packing_ratio": loader.packing_ratio}


def run_llmfoundry(root: Path, *, packed: bool, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from llmfoundry.data.finetuning import build_finetuning_dataloader
    from llmfoundry.models.mpt import ComposerMPTCausalLM

    torch.manual_seed(0)
    tok = _tokenizer(root)
    spec = build_finetuning_dataloader(
        tokenizer=tok,
        device_batch_size=args.batch,
        dataset={
            "hf_name": "json",
            "hf_kwargs": {"data_files": {"train": str(root / "train.jsonl")}},
            "split": "train",
            "max_seq_len": args.max_seq_len,
            "decoder_only_format": True,
            "shuffle": True,
            "allow_pad_trimming": False,
            "packing_ratio": "auto" if packed else None,
        },
        num_workers=0, pin_memory=False, prefetch_factor=None, persistent_workers=False,
    )  # fmt: skip
    model = ComposerMPTCausalLM(
        tokenizer=tok, loss_fn="torch_crossentropy", max_seq_len=args.max_seq_len, init_device="cpu",
        attn_config={"attn_impl": "torch", "attn_uses_sequence_id": packed}, **DIMS,
    )  # fmt: skip
    model = model.to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch: dict[str, torch.Tensor]) -> None:
        batch = {k: v.to(args.device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
        loss = model.loss(model(batch), batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    out = _timed_loop(step, _cycle(spec.dataloader), device=args.device, warmup=args.warmup, steps=args.steps)
    ratio = getattr(spec.dataloader.collate_fn, "packing_ratio", None)
    return {**out, "packing_ratio": ratio}


def child(args: argparse.Namespace) -> None:
    root = Path(args.root)
    packed = args.child.endswith("packed")
    t0 = time.perf_counter()
    if args.child.startswith("ours"):
        out = run_ours(root, packed=packed, args=args)
    else:
        out = run_llmfoundry(root, packed=packed, args=args)
    out["build_and_run_s"] = time.perf_counter() - t0
    out["peak_mem_mb"] = _peak_mb(args.device)
    print("RESULT " + json.dumps(out), flush=True)


def _spawn(python: str, case: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [python, str(HERE), "--child", case, "--root", str(root), "--device", args.device,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
           "--max-seq-len", str(args.max_seq_len)]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if case.startswith("llmfoundry"):
        env.update({"HF_HOME": str(root / "hf"), "PYTHONWARNINGS": "ignore"})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return {"error": (proc.stderr or proc.stdout)[-1500:]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-seq-len", type=int, default=512)
    p.add_argument("--examples", type=int, default=2000)
    p.add_argument("--device", default="cpu")
    p.add_argument("--llmfoundry-python", default="/tmp/ref/venv-llmfoundry/bin/python")
    p.add_argument("--no-llmfoundry", action="store_true")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--root", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    sys.path.insert(0, str(HERE.parent))
    from _common import machine

    cases = ["ours-packed", "ours-padded"]
    if not args.no_llmfoundry:
        cases += ["llmfoundry-padded", "llmfoundry-packed"]
    with tempfile.TemporaryDirectory(prefix="ft-bench-") as tmp:
        root = Path(tmp)
        write_data(root, examples=args.examples)
        info = machine()
        results: dict[str, dict[str, Any]] = {}
        for case in cases:
            python = args.llmfoundry_python if case.startswith("llmfoundry") else sys.executable
            if case.startswith("llmfoundry") and not Path(python).exists():
                results[case] = {
                    "error": f"{python} not found (../shared/bench/setup_llmfoundry.sh installs it)"
                }
            else:
                results[case] = _spawn(python, case, root, args)
            base = results.get("ours-padded", {}).get("loss_tokens_per_s")
            line = {"bench": "finetune_throughput", "case": case, "device": args.device, "dataset": DATASET,
                    "examples": args.examples, "max_seq_len": args.max_seq_len, "batch": args.batch,
                    "steps": args.steps, "model": DIMS, **results[case], **info}  # fmt: skip
            if base and "loss_tokens_per_s" in results[case]:
                line["vs_ours_padded"] = results[case]["loss_tokens_per_s"] / base
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
