"""ICL evaluation throughput: ours vs llm-foundry's padded scoring vs lm-eval's HF backend, same model.

For LAMBADA (language modelling) and PIQA (multiple choice, llm-foundry's 0-shot prompt with
continuation_delimiter "\\nAnswer: ") on the first `--limit` examples of the local files, one process runs:

* `ours`: `foundry.eval.evaluate_task` (length-sorted dynamic padding, shared-context KV reuse for MC);
* `padded`: the same with `pad_to_max_seq_len=True, cache_context=False` (llm-foundry's way: every row
  padded to max_seq_len, each choice a full row);
* `lm_eval_hf`: lm-eval 0.4.13's `hf` backend (`simple_evaluate`, tasks `evals/harness_tasks/*_local`) on the
  same weights exported with `foundry.models.export.export_hf`;
* `lm_eval_foundry`: lm-eval's pipeline with our adapter (`FoundryLM`) on our model.

The fast methods run `--rounds` interleaved times and keep their best time (padded runs once). It reports
examples/s per method, the ratios of ours to the others, and the accuracies, which must be
identical (LAMBADA accuracy; PIQA acc / acc_norm, and llm-foundry's accuracy for ours vs padded); a
mismatch is reported and exits 1 on CPU (fp32), only reported on GPU (bf16 kernels differ).

    python scripts/bench/icl_eval.py                          # CPU, ~20M-parameter MPT, a few minutes
    python scripts/bench/icl_eval.py --device cuda --model mpt-1b --limit 1000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(
    os.environ.get("FOUNDRY_SHARED_DATA", REPO.parent / "shared" / "data")
)  # test data (../shared beside the repo)
MODEL_20M = {  # ~19M parameters with the 50k gpt-neox vocabulary (embedding 12.9M); transformers-MPT compatible
    "d_model": 256, "n_heads": 4, "n_layers": 8, "vocab_size": 50304, "no_bias": True, "learned_pos_emb": False,
    "norm_type": "layernorm", "attn_config": {"attn_impl": "torch", "alibi": True},
}  # fmt: skip
TASKS = {
    "lambada": (
        "lambada_local",
        {
            "label": "lambada_openai",
            "dataset_uri": "language_understanding/lambada_openai.jsonl",
            "icl_task_type": "language_modeling",
        },
    ),
    "piqa": (
        "piqa_local",
        {
            "label": "piqa",
            "dataset_uri": "commonsense_reasoning/piqa.jsonl",
            "icl_task_type": "multiple_choice",
            "continuation_delimiter": "\nAnswer: ",
        },
    ),
}


def _build_model(name: str, *, max_seq_len: int, device: str) -> torch.nn.Module:
    from foundry.eval.harness_load import model_schema
    from foundry.models import MPTModelConfig, build_model_on

    if name == "mpt-20m":
        cfg = MPTModelConfig(**MODEL_20M, max_seq_len=max_seq_len)
    else:
        cfg = model_schema(name)
        cfg.max_seq_len = max_seq_len
        if device == "cpu":
            cfg.attn_config.attn_impl = "torch"
    torch.manual_seed(0)
    return build_model_on(cfg, device=device, init_device="meta").eval()


def _ours(
    model: Any, tok: Any, spec: dict, *, limit: int, bs: int, device: str, padded: bool, precision: str
) -> dict:
    from foundry.eval import EvalConfig, evaluate_task, load_tasks

    cfg = EvalConfig(icl_tasks=[{**spec, "num_fewshot": [0]}], data_root=str(SHARED / "icl"), limit=limit)
    (task,) = load_tasks(cfg)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    res = evaluate_task(
        model, tok, task, device=device, batch_size=bs, pad_to_max_seq_len=padded, cache_context=not padded,
        precision=precision,
    )  # fmt: skip
    if device == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - start
    return {
        "seconds": secs,
        "examples_per_s": len(res.examples) / secs,
        "n": len(res.examples),
        "metrics": res.metrics,
    }


def _lm_eval(lm: Any, task: str, *, limit: int, bs: int, device: str) -> dict:
    import lm_eval
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(REPO / "evals" / "harness_tasks"), include_defaults=False)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    res = lm_eval.simple_evaluate(
        model=lm, tasks=[task], task_manager=tm, limit=limit, bootstrap_iters=0, batch_size=bs, device=device
    )
    if device == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - start
    m = res["results"][task]
    metrics = {k.split(",")[0]: v for k, v in m.items() if k.startswith("acc") and "stderr" not in k}
    return {"seconds": secs, "examples_per_s": limit / secs, "n": limit, "metrics": metrics}


def _same(a: dict, b: dict, keys: list[str]) -> bool:
    return all(a["metrics"].get(k) == b["metrics"].get(k) for k in keys)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument(
        "--model", default=None, help="mpt-20m (CPU default) or a conf/model name (GPU default mpt-1b)"
    )
    p.add_argument("--limit", type=int, default=None, help="examples per task (CPU 40, GPU 1000)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-seq-len", type=int, default=1024, help="what `padded` pads every row to")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the fast methods (best kept)")
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--skip", nargs="*", default=[], choices=["padded", "lm_eval_hf", "lm_eval_foundry"])
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"bench": "icl_eval", "skipped": "no CUDA device", "machine": machine()}))
        return 0
    if not (SHARED / "icl").is_dir():
        print(json.dumps({"bench": "icl_eval", "skipped": f"no ICL data at {SHARED / 'icl'}"}))
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ["EVAL_DATA"] = str(SHARED / "icl")
    gpu = args.device == "cuda"
    name = args.model or ("mpt-1b" if gpu else "mpt-20m")
    limit = args.limit or (1000 if gpu else 40)
    precision = "amp_bf16" if gpu else "fp32"

    if not {"lm_eval_hf", "lm_eval_foundry"} <= set(args.skip):  # lm-eval (a dev extra) only when compared
        from lm_eval.models.huggingface import HFLM

        from foundry.eval.harness import FoundryLM
    from foundry.models import register_auto_classes
    from foundry.models.export import export_hf
    from foundry.tokenizers import TokenizerConfig, build_tokenizer

    tok = build_tokenizer(
        TokenizerConfig(name=str(SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"))
    )
    model = _build_model(name, max_seq_len=args.max_seq_len, device=args.device)
    n_params = sum(p.numel() for p in model.parameters())
    register_auto_classes()
    result: dict[str, Any] = {
        "bench": "icl_eval", "model": name, "n_params": n_params, "device": args.device, "limit": limit,
        "batch_size": args.batch_size, "max_seq_len": args.max_seq_len, "precision": precision,
        "rounds": args.rounds, "tasks": {},
    }  # fmt: skip
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        fmt = export_hf(model.float().cpu(), Path(tmp) / "hf", tokenizer=tok)
        model.to(args.device)
        result["export_format"] = fmt
        dtype = "bfloat16" if gpu else "float32"
        hf = None if "lm_eval_hf" in args.skip else HFLM(
            pretrained=str(Path(tmp) / "hf"), dtype=dtype, device=args.device, batch_size=args.batch_size,
            max_length=args.max_seq_len,
        )  # fmt: skip
        ours_lm = (
            None
            if "lm_eval_foundry" in args.skip
            else FoundryLM(model, tok, device=args.device, batch_size=args.batch_size)
        )
        for key in args.tasks:  # warm-up (allocator, kernels, lazy imports) outside the timings
            _ours(
                model,
                tok,
                TASKS[key][1],
                padded=False,
                precision=precision,
                limit=2,
                bs=2,
                device=args.device,
            )
            if hf is not None:
                _lm_eval(hf, TASKS[key][0], limit=2, bs=2, device=args.device)
        for key in args.tasks:
            harness_task, spec = TASKS[key]
            kw = {"limit": limit, "bs": args.batch_size, "device": args.device}
            runs: dict[str, Any] = {
                "ours": partial(_ours, model, tok, spec, padded=False, precision=precision, **kw)
            }
            if hf is not None:
                runs["lm_eval_hf"] = partial(_lm_eval, hf, harness_task, **kw)
            if ours_lm is not None:
                runs["lm_eval_foundry"] = partial(_lm_eval, ours_lm, harness_task, **kw)
            row: dict[str, Any] = {}
            for _ in range(args.rounds):  # interleaved rounds, best time kept (a shared machine is noisy)
                for method, run in runs.items():
                    got = run()
                    if method not in row or got["seconds"] < row[method]["seconds"]:
                        row[method] = got
            if "padded" not in args.skip:  # one round: it is the slow one
                row["padded"] = _ours(model, tok, spec, padded=True, precision=precision, **kw)
            lm_keys = ["acc"] if key == "lambada" else ["acc", "acc_norm"]
            ours_as_lm_eval = {"metrics": dict(row["ours"]["metrics"])}
            if key == "lambada":
                ours_as_lm_eval["metrics"]["acc"] = row["ours"]["metrics"]["InContextLearningLMAccuracy"]
            checks = {}
            if "padded" in row:
                checks["padded"] = _same(row["ours"], row["padded"], list(row["ours"]["metrics"]))
            for other in ("lm_eval_hf", "lm_eval_foundry"):
                if other in row:
                    checks[other] = _same(ours_as_lm_eval, row[other], lm_keys)
            row["identical_accuracy"] = checks
            timed = [k for k in ("padded", "lm_eval_hf", "lm_eval_foundry") if k in row]
            rate = row["ours"]["examples_per_s"]
            row["speedup_vs"] = {k: round(rate / row[k]["examples_per_s"], 2) for k in timed}
            ok = ok and all(checks.values())
            result["tasks"][key] = row
    result["identical_accuracy"] = ok
    result["machine"] = {**machine(), "loadavg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(result), flush=True)
    return 0 if ok or gpu else 1


if __name__ == "__main__":
    sys.exit(main())
