"""Write small stand-in MDS streams (random token ids) in the layout of conf/data/streams/, in seconds.

Then any mixture trains offline:
  python scripts/data_prep/make_standin_mix.py --out /tmp/standin-mix
  python train.py data=mpt-7b-mix data.local_root=/tmp/standin-mix data.remote_root=null \
      model=mpt-tiny tokenizer=none trainer=cpu trainer.max_duration=3ba
Every stream option file gets `<out>/<path>/<split>` (train) and `<out>/<path>/<eval_split>` when it has one.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from stackbase.venv import use_project_venv

use_project_venv(__file__)  # a fresh shell's `python` lacks the packages: run in the checkout's .venv

import argparse
import time

from foundry.data.standin import read_stream_layouts, write_standin_streams

STREAMS_CONF = Path(__file__).resolve().parents[2] / "conf" / "data" / "streams"


def main(argv: list[str] | None = None) -> int:
    """Parses the arguments and writes the stand-ins; returns the exit code."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="the local root (then data.local_root=<out>)")
    ap.add_argument("--streams", type=Path, default=STREAMS_CONF, help="folder of stream option files")
    ap.add_argument("--samples", type=int, default=256, help="rows per training split (per stream)")
    ap.add_argument("--eval-samples", type=int, default=32, help="rows per eval split")
    ap.add_argument("--seq-len", type=int, default=128, help="tokens per row (mpt-tiny: 128)")
    ap.add_argument("--vocab-size", type=int, default=512, help="ids in [1, vocab); mpt-tiny: 512")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    start = time.perf_counter()
    layouts = read_stream_layouts(args.streams)
    written = write_standin_streams(
        args.out,
        layouts=layouts,
        samples=args.samples,
        eval_samples=args.eval_samples,
        seq_len=args.seq_len,
        vocab_size=args.vocab_size,
        seed=args.seed,
    )
    took = time.perf_counter() - start
    print(
        f"wrote {len(written)} splits of {len(layouts)} streams under {args.out} in {took:.1f} s", flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
