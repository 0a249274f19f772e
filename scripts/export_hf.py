"""Export a model to a Hugging Face folder (config.json, model.safetensors, tokenizer).

Examples:
    python scripts/export_hf.py --src outputs/quickstart/checkpoints --out exported/
    python scripts/export_hf.py --src outputs/run/checkpoints/ep0-ba600 --out exported/ --tokenizer tok.json
    python scripts/export_hf.py --src outputs/run/hf --out exported/ --tokenizer /path/to/tokenizer.json
    python scripts/export_hf.py --src weights.pt --config config.json --out exported/ --format hf_mpt

`--src` is one of:
  * a checkpoint the trainer wrote (a folder with `manifest.json`, full or sharded), or a save folder of them
    (`outputs/<run>/checkpoints`: its newest complete one), local or a URL. This goes through the same code as
    `scripts/convert_checkpoint.py --to hf`; without `--tokenizer` the training run's tokenizer (from its
    `run.json`) is saved alongside;
  * a folder written by `save_pretrained` (foundry_mpt), or a weights file (.pt/.safetensors) with `--config`.

`--format auto` writes transformers' built-in `mpt` format (loads in `transformers.MptForCausalLM`) when the
model's options map onto it (ALiBi, no_bias, LayerNorm, GELU MLP, MHA), else our `foundry_mpt` format with
the modelling code beside the weights (`auto_map` in config.json, as llm-foundry's exports): plain
transformers loads it with `AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)`, without this
project installed (or `foundry.models.load_pretrained`). It prints which format it wrote and why.

A mistake in the arguments (a missing path, a format the model cannot take) prints one `error: ...` line and
exits 2; `HYDRA_FULL_ERROR=1` adds the traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from stackbase.venv import use_project_venv

use_project_venv(__file__)  # a fresh shell's `python` lacks the packages: run in the checkout's .venv

import argparse
from typing import Any

import torch

from foundry.errors import ConfigError, require_path, run_tool
from foundry.models.export import FORMATS, describe_export, export_checkpoint, is_trainer_checkpoint
from foundry.tokenizers import TokenizerConfig, build_tokenizer, run_tokenizer_config

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _tokenizer(name: str | None, src: str, *, trainer_checkpoint: bool) -> Any:
    """`--tokenizer` when given; else, for a trainer checkpoint, its run's tokenizer (None if unavailable)."""
    if name:
        return build_tokenizer(TokenizerConfig(name=name))
    cfg = run_tokenizer_config(src) if trainer_checkpoint else None
    if cfg is None:
        print(
            f"note: no tokenizer saved with the export (none given, none found for {src}); pass --tokenizer"
        )
        return None
    try:
        tok = build_tokenizer(cfg)
    except ValueError as err:
        print(f"note: the run's tokenizer {cfg.name!r} could not be loaded ({err}); pass --tokenizer")
        return None
    print(f"tokenizer: {cfg.name} (from the training run's run.json)")
    return tok


def _check_paths(args: argparse.Namespace) -> None:
    """Every path argument exists (URLs are checked by their store), before anything is loaded."""
    require_path(
        "--src",
        args.src,
        fix="pass a trainer checkpoint folder or its save folder (outputs/<run>/checkpoints), "
        "a save_pretrained folder, or a weights file with --config",
    )
    if args.config:
        require_path("--config", args.config, fix="pass the config.json of the model in --src")
    if args.base:
        require_path("--base", args.base, fix="pass the base model's trainer checkpoint folder")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--src",
        required=True,
        help="trainer checkpoint folder or save folder (manifest.json), save_pretrained folder, or weights file",
    )
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--config", help="config.json of the model (needed with a weights file)")
    p.add_argument(
        "--base", help="the base model's trainer checkpoint (for an adapters-only LoRA checkpoint)"
    )
    p.add_argument("--tokenizer", help="tokenizer.json path, saved folder or cached hub name")
    p.add_argument("--format", default="auto", choices=FORMATS)
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    args = p.parse_args(argv)
    _check_paths(args)
    trainer_checkpoint = is_trainer_checkpoint(args.src)
    if not trainer_checkpoint and not Path(args.src).is_dir() and args.config is None:
        raise ConfigError(
            f"--src {args.src} is a weights file: pass the model's config.json too (--config), "
            "or a trainer checkpoint / save_pretrained folder as --src"
        )
    tok = _tokenizer(args.tokenizer, args.src, trainer_checkpoint=trainer_checkpoint)
    if trainer_checkpoint:
        from foundry.checkpoint.convert import to_hf

        fmt = to_hf(
            args.src, args.out, tokenizer=tok, fmt=args.format, dtype=DTYPES[args.dtype], base=args.base
        )
    else:
        fmt = export_checkpoint(
            args.src, args.out, config=args.config, tokenizer=tok, fmt=args.format, dtype=DTYPES[args.dtype]
        )
    print(f"wrote {fmt} checkpoint to {Path(args.out)}")
    print(f"format: {describe_export(args.out, requested=args.format)}")


if __name__ == "__main__":
    sys.exit(run_tool(main))
