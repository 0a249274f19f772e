"""Convert a checkpoint between the sharded and full formats, or export its model to a Hugging Face folder.

Examples:
    python scripts/convert_checkpoint.py --src outputs/run/checkpoints/ep0-ba200 --to full --out /tmp/ckpt-full/ep0-ba200
    python scripts/convert_checkpoint.py --src s3://bucket/ckpts/run --to sharded --out s3://bucket/ckpts-sharded/ep0-ba200
    python scripts/convert_checkpoint.py --src outputs/run/checkpoints --to hf --out exported/ --tokenizer tok.json
    python scripts/convert_checkpoint.py --from composer ckpts/ep0-ba10-rank0.pt /tmp/ours/ep0-ba10
    python scripts/convert_checkpoint.py --from composer ckpts/ep0-ba10/ --to hf exported/   # sharded Composer
    python scripts/convert_checkpoint.py --from composer s3://bucket/ckpts/ep0-ba10-rank0.pt.zst /tmp/ours/ep0-ba10
    python scripts/convert_checkpoint.py --src outputs/run/checkpoints --to composer --out ep0-ba200-rank0.pt

`--from composer` reads a Composer/llm-foundry checkpoint (a `.pt` file, a `.tar`, or a sharded
torch.distributed.checkpoint folder) without running code from it and writes one of our full checkpoints
(weights, DecoupledAdamW state, schedule position, counters, RNG, data position), or with `--to hf` an HF folder;
also `.pt.zst`/`.pt.lz4` and object-store URLs. `--to composer` is the way back: a Composer `.pt` that an
llm-foundry run resumes from (`load_path`).

`--src` is a checkpoint directory or a save folder (its newest complete checkpoint), local or any object-store
URL. Tensors are streamed through memory-mapped buffers: memory stays bounded by the largest tensor, not the
checkpoint. The output is a complete checkpoint with its own manifest (for `--to hf`: an HF folder). A mistake
in the arguments (a missing path, a format the model cannot take) prints one `error: ...` line and exits 2;
`HYDRA_FULL_ERROR=1` adds the traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from stackbase.venv import use_project_venv

use_project_venv(__file__)  # a fresh shell's `python` lacks the packages: run in the checkout's .venv

import argparse

import torch

from foundry.checkpoint.convert import convert_checkpoint, to_hf
from foundry.errors import require_path, run_tool
from foundry.models.export import FORMATS
from foundry.tokenizers import TokenizerConfig, build_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--src", help="checkpoint directory or save folder (local or URL); or the first positional"
    )
    p.add_argument(
        "--out",
        "--dst",
        dest="dst",
        help="output checkpoint directory (local or URL) or HF folder (--out as in export_hf.py; --dst too); "
        "or the second positional",
    )
    p.add_argument("paths", nargs="*", metavar="SRC DST", help="--src and --out given by position")
    p.add_argument("--from", dest="source", default="foundry", choices=["foundry", "composer"])
    p.add_argument(
        "--to",
        choices=["full", "sharded", "hf", "composer"],
        help="output format (--from composer: full); composer: a Composer .pt llm-foundry resumes from",
    )
    p.add_argument("--weights-only", action="store_true", help="--from composer: convert only the weights")
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
    args.src, args.dst = _src_dst(p, args)
    if args.source == "composer":
        return _from_composer(args)
    if args.to is None:
        p.error("--to is required (full, sharded or hf)")
    require_path("--src", args.src, fix="pass a checkpoint folder (with manifest.json) or its save folder")
    if args.to == "composer":
        return _to_composer(args)
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


def _src_dst(p: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, str]:
    given = [args.src, args.dst]
    positional = list(args.paths)
    if len(positional) > sum(v is None for v in given):
        p.error(f"too many paths: {positional}")
    src = args.src or (positional.pop(0) if positional else None)
    dst = args.dst or (positional.pop(0) if positional else None)
    if src is None or dst is None:
        p.error("pass the source and the destination (--src/--out or SRC DST)")
    return src, dst


def _to_composer(args: argparse.Namespace) -> None:
    """Our checkpoint -> a Composer checkpoint file (`load_path` of an llm-foundry run)."""
    from foundry.compat.composer.export import to_composer

    if "://" in args.dst:
        raise ValueError(f"--out {args.dst}: --to composer writes a local .pt file (upload it afterwards)")
    what = to_composer(args.src, args.dst, work_dir=args.work_dir)
    print(f"wrote a Composer checkpoint to {args.dst} ({what}); resume it with load_path in llm-foundry")


def _from_composer(args: argparse.Namespace) -> None:
    """A Composer checkpoint -> our full checkpoint (`--to full`, default) or an HF folder (`--to hf`)."""
    import tempfile

    from foundry.compat.composer import to_foundry

    if args.to == "sharded":
        raise ValueError("--from composer writes --to full (convert that to sharded afterwards) or --to hf")
    require_path("--src", args.src, fix="pass a Composer checkpoint file (.pt) or its sharded folder")
    if args.allow_pickle:
        raise ValueError(
            "--allow-pickle does not apply to --from composer (it is always read without pickle)"
        )
    if args.to != "hf":
        where, what = to_foundry(args.src, args.dst, weights_only=args.weights_only, work_dir=args.work_dir)
        print(f"wrote a full checkpoint to {where} from the Composer checkpoint {args.src} ({what})")
        return
    with tempfile.TemporaryDirectory(dir=args.work_dir, prefix="composer-hf-") as tmp:
        where, _ = to_foundry(args.src, f"{tmp}/ckpt", weights_only=True, work_dir=tmp)
        tok = build_tokenizer(TokenizerConfig(name=args.tokenizer)) if args.tokenizer else None
        fmt = to_hf(where, args.dst, tokenizer=tok, fmt=args.hf_format, dtype=DTYPES[args.dtype])
    print(f"wrote a {fmt} Hugging Face folder to {args.dst} from the Composer checkpoint {args.src}")


if __name__ == "__main__":
    sys.exit(run_tool(main))
