"""Export an MPT checkpoint to a Hugging Face folder (config.json, model.safetensors, tokenizer).

Examples:
    python scripts/export_hf.py --src outputs/run/hf --out exported/ --tokenizer /path/to/tokenizer.json
    python scripts/export_hf.py --src weights.pt --config config.json --out exported/ --format hf_mpt

`--format auto` writes transformers' built-in `mpt` format (loads in `transformers.MptForCausalLM`) when the
model's options map onto it (ALiBi, no_bias, LayerNorm, GELU MLP, MHA), else our `foundry_mpt` format
(load with `foundry.models.load_pretrained`).
"""

from __future__ import annotations

import argparse

import torch

from foundry.models.export import FORMATS, export_checkpoint
from foundry.tokenizers import TokenizerConfig, build_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True, help="save_pretrained folder or a weights file (.pt/.safetensors)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--config", help="config.json of the model (needed with a weights file)")
    p.add_argument("--tokenizer", help="tokenizer.json path, saved folder or cached hub name")
    p.add_argument("--format", default="auto", choices=FORMATS)
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    args = p.parse_args(argv)
    tok = build_tokenizer(TokenizerConfig(name=args.tokenizer)) if args.tokenizer else None
    fmt = export_checkpoint(
        args.src, args.out, config=args.config, tokenizer=tok, fmt=args.format, dtype=DTYPES[args.dtype]
    )
    print(f"wrote {fmt} checkpoint to {args.out}")


if __name__ == "__main__":
    main()
