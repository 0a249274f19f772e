"""Generate completions from a trained model (a trainer checkpoint, an HF folder, or base + LoRA adapter).

Examples:
    python scripts/generate.py --model outputs/quickstart/checkpoints --prompt "The history of"
    python scripts/generate.py --model exported/ --prompt "Hello" --prompt "Goodbye" --max-new-tokens 32
    python scripts/generate.py --model exported/ --adapter outputs/run/adapter --chat '[{"role":"user","content":"Hi"}]'
    python scripts/generate.py --model outputs/run/checkpoints --prompts-file prompts.jsonl --temperature 0.7 \\
        --top-p 0.9 --stop "###"

`--model` is a trainer checkpoint (a folder with `manifest.json`, or a save folder: its newest complete one;
local or a URL; LoRA adapters included when it was trained with them; the tokenizer comes from the training
run's `run.json` unless `--tokenizer` is given) or a transformers folder (`scripts/export_hf.py`). A
`--prompts-file` is one prompt per line, or `.jsonl` rows with `prompt` (text) or `messages` (a chat).
Completions print one per prompt, in order (`--json`: one JSON object per line). A mistake in the arguments
(a missing folder or file, a bad value) prints one `error: ...` line and exits 2; `HYDRA_FULL_ERROR=1` adds
the traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from stackbase.venv import use_project_venv

use_project_venv(__file__)  # a fresh shell's `python` lacks the packages: run in the checkout's .venv

import argparse
import json

import torch

from foundry.errors import ConfigError, require_path, run_tool
from foundry.generate import SamplingConfig, generate, load_for_generation, read_prompts

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model", required=True, help="trainer checkpoint / save folder, or a transformers folder"
    )
    p.add_argument("--adapter", help="a PEFT (LoRA) adapter folder to apply on top of --model")
    p.add_argument(
        "--base", help="the base model's trainer checkpoint (for an adapters-only --model checkpoint)"
    )
    p.add_argument("--tokenizer", help="tokenizer.json, folder or cached hub name (default: the model's)")
    p.add_argument("--prompt", action="append", default=[], help="a text prompt (repeatable)")
    p.add_argument("--chat", action="append", default=[], help="a chat as a JSON list of {role, content}")
    p.add_argument("--prompts-file", help="one prompt per line, or .jsonl rows with prompt or messages")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument(
        "--stop", action="append", default=[], help="stop string (repeatable); cut from the output"
    )
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--json", action="store_true", help="print {prompt, completion} JSON lines")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="decode without the KV cache (recomputes every prefix; greedy output must not change)",
    )
    return p


def _looks_local(name: str) -> bool:
    """Whether `--model`/`--tokenizer` names a local path rather than a hub id (`name` or `org/name`)."""
    if "://" in name:
        return False
    first = name.split("/", 1)[0]
    return name.startswith((".", "/", "~")) or name.count("/") != 1 or Path(first).is_dir()


def _check_args(args: argparse.Namespace) -> None:
    """Every path argument exists and every device can be used, before a model is loaded."""
    if _looks_local(args.model):
        require_path(
            "--model",
            args.model,
            fix="pass a trainer checkpoint or its save folder (outputs/<run>/checkpoints) "
            "or a folder written by scripts/export_hf.py",
        )
    if args.adapter:
        require_path("--adapter", args.adapter, fix="pass the folder a LoRA run saved its adapter to")
    if args.base:
        require_path("--base", args.base, fix="pass the base model's trainer checkpoint folder")
    if args.prompts_file:
        require_path("--prompts-file", args.prompts_file, fix="pass a text or .jsonl file of prompts")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {args.device}: no CUDA device is available here; pass --device cpu")


def _chats(chats: list[str]) -> list[list[dict[str, str]]]:
    out = []
    for i, chat in enumerate(chats, 1):
        try:
            messages = json.loads(chat)
        except json.JSONDecodeError as err:
            raise ConfigError(f"--chat #{i} is not JSON ({err}): pass a list of {{role, content}}") from err
        if not isinstance(messages, list):
            raise ConfigError(f"--chat #{i}: expected a JSON list of {{role, content}} messages")
        out.append(messages)
    return out


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    _check_args(args)
    prompts: list[str | list[dict[str, str]]] = [*args.prompt, *_chats(args.chat)]
    if args.prompts_file:
        prompts += read_prompts(args.prompts_file)
    if not prompts:
        raise ConfigError("nothing to complete: pass --prompt, --chat or --prompts-file")
    cfg = SamplingConfig(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        stop=args.stop,
        batch_size=args.batch_size,
        seed=args.seed,
        use_cache=not args.no_cache,
    )
    model, tokenizer = load_for_generation(
        args.model,
        adapter=args.adapter,
        base=args.base,
        tokenizer=args.tokenizer,
        device=args.device,
        dtype=DTYPES[args.dtype],
    )
    completions = generate(model, tokenizer, prompts, cfg)
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True), start=1):
        if args.json:
            print(json.dumps({"prompt": prompt, "completion": completion}), flush=True)
        else:
            print(format_completion(i, len(prompts), prompt, completion), flush=True)


def format_completion(i: int, n: int, prompt: object, completion: str) -> str:
    """One completion for the console: a header line with the prompt quoted on one line (prompts in an
    instruction format start with `###` themselves, so a `### <prompt>` header ran into them), then the text."""
    return f"[prompt {i}/{n}] {json.dumps(prompt, ensure_ascii=False)}\n{completion}\n"


if __name__ == "__main__":
    sys.exit(run_tool(main))
