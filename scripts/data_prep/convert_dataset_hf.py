"""Tokenize a HF dataset or local txt/json/jsonl files into concatenated MDS rows (`tokens` column).

Examples:
  python scripts/data_prep/convert_dataset_hf.py --dataset allenai/c4 --data_subset en \
      --splits train_small val_small --out data/c4 --tokenizer EleutherAI/gpt-neox-20b \
      --concat_tokens 2048 --eos_text '<|endoftext|>' --compression zstd
  python scripts/data_prep/convert_dataset_hf.py --dataset path/to/wikitext-2 --splits train validation \
      --out data/wt2 --tokenizer path/to/tokenizer.json --concat_tokens 512 --eos_text '<|endoftext|>'
  python scripts/data_prep/convert_dataset_hf.py --dataset s3://bucket/corpus/ --splits train \
      --out s3://bucket/mds --tokenizer path/to/tokenizer.json --concat_tokens 2048 --eos_text '<|endoftext|>'
  (files: a local folder or object-store prefix holding <split>/*.{txt,json,jsonl} or <split>*.{txt,json,jsonl},
  or one such file or URL; json rows need a `text` field)
  Stores are chosen by URL prefix (STREAMING_STORAGE_PROFILES, or --storage_profiles FILE: a profiles file or
  a conf/storage/<name>.yaml), so input and output may be on different stores.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from stackbase.venv import use_project_venv

use_project_venv(__file__)  # a fresh shell's `python` lacks the packages: run in the checkout's .venv

import argparse
import json
from collections.abc import Iterator

from streaming.tools.storage_option import add_storage_option, apply_storage_option

# llm-foundry's split constants for C4: our split name -> (HF split, max documents or None)
C4_SPLITS = {
    "train": ("train", None),
    "train_small": ("train", 100_000),
    "val": ("validation", None),
    "val_small": ("validation", 10_000),
    "val_xsmall": ("validation", 3_000),
    "val_xxsmall": ("validation", 100),
}


def _hf_texts(name: str, subset: str | None, split: str) -> Iterator[str]:
    try:
        import datasets
    except ImportError as e:
        raise SystemExit(
            "HF hub datasets need the `datasets` package: pip install 'foundry-stack[hf]'"
        ) from e
    hf_split, limit = C4_SPLITS.get(split, (split, None)) if name == "allenai/c4" else (split, None)
    ds = datasets.load_dataset(name, subset, split=hf_split, streaming=True)
    for i, row in enumerate(ds):
        if limit is not None and i >= limit:
            break
        yield row["text"]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dataset",
        default="allenai/c4",
        help="HF dataset name, or a local/object-store (s3://...) file or folder",
    )
    p.add_argument("--data_subset", default=None, help="HF config name (C4: en)")
    p.add_argument("--splits", nargs="+", default=["train_small", "val_small"])
    p.add_argument("--out", "--out_root", dest="out", required=True, help="output dir or object-store URL")
    p.add_argument("--tokenizer", required=True, help="tokenizer.json, a saved folder, or a cached hub name")
    p.add_argument("--concat_tokens", type=int, required=True, help="row length (max_seq_len)")
    p.add_argument("--bos_text", default="")
    p.add_argument("--eos_text", default="")
    p.add_argument(
        "--no_wrap", action="store_true", help="drop each document's remainder instead of carrying it"
    )
    p.add_argument(
        "--record_documents",
        action="store_true",
        help="also store each row's document lengths (column document_lengths) for exact document masking",
    )
    p.add_argument("--compression", default=None, help="e.g. zstd")
    p.add_argument("--num_workers", type=int, default=1, help="tokenizer processes")
    p.add_argument(
        "--txt_docs", choices=["file", "line"], default="file", help=".txt: one document per file or line"
    )
    p.add_argument("--no_progress", action="store_true")
    add_storage_option(p, "--storage_profiles")
    args = p.parse_args(argv)
    apply_storage_option(args.storage_profiles)  # before any URL is opened (input, output)

    from tqdm.auto import tqdm

    from foundry.data.prep import convert_texts, input_files, read_documents
    from foundry.tokenizers import TokenizerConfig, build_tokenizer
    from streaming.storage import is_remote

    tokenizer = build_tokenizer(TokenizerConfig(name=args.tokenizer))
    files = is_remote(args.dataset) or Path(args.dataset.removeprefix("file://")).exists()
    report = {}
    for split in args.splits:
        texts = (
            read_documents(input_files(args.dataset, split), txt_docs=args.txt_docs)
            if files
            else _hf_texts(args.dataset, args.data_subset, split)
        )
        bar = None if args.no_progress else tqdm(desc=f"{split}", unit="doc", file=sys.stderr)
        out = f"{args.out.rstrip('/')}/{split}"
        stats = convert_texts(
            texts,
            tokenizer=tokenizer,
            out=out,
            max_seq_len=args.concat_tokens,
            bos_text=args.bos_text,
            eos_text=args.eos_text,
            wrap=not args.no_wrap,
            compression=args.compression,
            num_workers=args.num_workers,
            progress=bar,
            record_documents=args.record_documents,
        )
        if bar is not None:
            bar.close()
        report[split] = {
            "out": out,
            "documents": stats.documents,
            "rows": stats.rows,
            "tokens": stats.tokens,
            "seconds": round(stats.seconds, 3),
            "tokens_per_sec": round(stats.tokens_per_second),
        }
        print(json.dumps({"split": split, **report[split]}), flush=True)
    return report


if __name__ == "__main__":
    main()
