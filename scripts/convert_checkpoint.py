"""Convert a checkpoint between the sharded and full formats, or export its model to a Hugging Face folder.

Examples:
    python scripts/convert_checkpoint.py --src outputs/run/checkpoints/ep0-ba200 --to full --dst /tmp/ckpt-full/ep0-ba200
    python scripts/convert_checkpoint.py --src s3://bucket/ckpts/run --to sharded --dst s3://bucket/ckpts-sharded/ep0-ba200
    python scripts/convert_checkpoint.py --src outputs/run/checkpoints --to hf --dst exported/ --tokenizer tok.json

`--src` is a checkpoint directory or a save folder (its newest complete checkpoint), local or any object-store
URL. Tensors are streamed through memory-mapped buffers: memory stays bounded by the largest tensor, not the
checkpoint. The output is a complete checkpoint with its own manifest (for `--to hf`: an HF folder). A mistake
in the arguments (a missing path, a format the model cannot take) prints one `error: ...` line and exits 2;
`HYDRA_FULL_ERROR=1` adds the traceback.
"""

from __future__ import annotations

import argparse
import sys

import torch

from foundry.checkpoint.convert import convert_checkpoint, to_hf
from foundry.errors import require_path, run_tool
from foundry.models.export import FORMATS
from foundry.tokenizers import TokenizerConfig, build_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True, help="checkpoint directory or save folder (local or URL)")
    p.add_argument("--dst", required=True, help="output checkpoint directory (local or URL) or HF folder")
    p.add_argument("--to", required=True, choices=["full", "sharded", "hf"])
    p.add_argument(
        "--work-dir", help="scratch for downloads and memory-mapped buffers (default: system temp)"
    )
    p.add_argument("--tokenizer", help="--to hf: tokenizer.json path or saved folder to include")
    p.add_argument(
        "--hf-format", default="auto", choices=FORMATS, help="--to hf: transformers mpt or foundry_mpt"
    )
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="--to hf: weight dtype on disk")
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="read pickled objects in the source without the safe loader (arbitrary code: trusted files only)",
    )
    args = p.parse_args(argv)
    require_path("--src", args.src, fix="pass a checkpoint folder (with manifest.json) or its save folder")
    if args.to == "hf":
        tok = build_tokenizer(TokenizerConfig(name=args.tokenizer)) if args.tokenizer else None
        fmt = to_hf(
            args.src,
            args.dst,
            tokenizer=tok,
            fmt=args.hf_format,
            dtype=DTYPES[args.dtype],
            allow_pickle=args.allow_pickle,
        )
        print(f"wrote a {fmt} Hugging Face folder to {args.dst}")
        return
    where = convert_checkpoint(
        args.src, args.dst, to=args.to, work_dir=args.work_dir, allow_pickle=args.allow_pickle
    )
    print(f"wrote a {args.to} checkpoint to {where}")


if __name__ == "__main__":
    sys.exit(run_tool(main))
