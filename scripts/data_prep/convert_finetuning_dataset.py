"""Convert finetuning data (prompt/response or chat rows) into MDS, raw or tokenized, locally or to a bucket.

Examples:
  python scripts/data_prep/convert_finetuning_dataset.py --dataset data/instruct --splits train val \
      --out data/instruct-mds
  python scripts/data_prep/convert_finetuning_dataset.py --dataset mosaicml/dolly_hhrlhf --splits train test \
      --out s3://bucket/dolly-mds --tokenizer path/to/tokenizer.json --max_seq_len 2048 --compression zstd
  python scripts/data_prep/convert_finetuning_dataset.py --dataset path/to/alpaca.parquet --splits train \
      --preprocessor alpaca --out data/alpaca-mds
  (--dataset: a .jsonl/.json/.csv/.parquet file, a local or store folder of {split}.* files, a folder saved
  with save_to_disk, or a cached HF hub name; then train with data.local=<out> or data.remote=<out>)
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

from streaming.tools.storage_option import add_storage_option, apply_storage_option


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dataset", required=True, help="file, folder (local or URL), saved HF dataset or hub name"
    )
    p.add_argument("--splits", nargs="+", default=["train"])
    p.add_argument("--out", "--out_root", dest="out", required=True, help="output folder or store URL")
    p.add_argument("--preprocessor", default=None, help="registered name (alpaca, dolly) or module:function")
    p.add_argument("--hf_kwargs", default="{}", help="JSON dict of extra datasets.load_dataset arguments")
    p.add_argument("--tokenizer", default=None, help="tokenize into `turns` (tokenizer.json or folder)")
    p.add_argument(
        "--max_seq_len", type=int, default=2048, help="tokenized output: drop rows with no loss token"
    )
    p.add_argument("--target_prompts", default="none")
    p.add_argument("--target_responses", default="last")
    p.add_argument("--compression", default=None, help="e.g. zstd")
    p.add_argument("--no_progress", action="store_true")
    add_storage_option(p, "--storage_profiles")
    args = p.parse_args(argv)
    apply_storage_option(args.storage_profiles)  # before any URL is opened (input, output)

    from foundry.data.finetune.convert import convert_finetuning_dataset

    tokenizer = None
    if args.tokenizer is not None:
        from foundry.tokenizers import TokenizerConfig, build_tokenizer

        tokenizer = build_tokenizer(TokenizerConfig(name=args.tokenizer))
    summary = convert_finetuning_dataset(
        args.dataset,
        splits=args.splits,
        out=args.out,
        preprocessing_fn=args.preprocessor,
        hf_kwargs=json.loads(args.hf_kwargs),
        tokenizer=tokenizer,
        max_seq_len=args.max_seq_len,
        target_prompts=args.target_prompts,
        target_responses=args.target_responses,
        compression=args.compression,
        progress=not args.no_progress,
    )
    result = {"out": args.out, "written": summary.written, "dropped": summary.dropped}
    print(json.dumps(result), file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
