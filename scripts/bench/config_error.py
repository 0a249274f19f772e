"""How long a config mistake takes to be answered (issue 40: 7-27 s on a quiet 2-core machine, most of it importing
torch before the first check). Target: < 3 s for the mistakes checked before the heavy imports.

Runs `python train.py <mistake>` in a fresh process for each mistake (`--repeat` times, median) and prints one
JSON line: seconds per mistake and whether it was answered before torch loaded (`early`, from the exit path).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

REPO = Path(__file__).resolve().parents[2]
MISTAKES = {
    "unknown key": ["modle=mpt-125m"],
    "unknown nested key": ["model.d_modle=64"],
    "unknown group option": ["model=mpt-tinny"],
    "unknown experiment": ["experiment=smoke-cpuu"],
    "not an int": ["model.d_model=abc"],
    "bad duration (checked after composing)": ["trainer.max_duration=abc"],
}


def _time(args: list[str], cwd: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args], cwd=cwd, capture_output=True, text=True
    )
    took = time.perf_counter() - start
    if proc.returncode != 2 or not proc.stderr.startswith("error: "):
        raise SystemExit(
            f"{args}: expected one error line and exit 2, got {proc.returncode}: {proc.stderr[-500:]}"
        )
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        seconds = {
            name: statistics.median(_time(a, cwd) for _ in range(args.repeat)) for name, a in MISTAKES.items()
        }
    print(json.dumps({"bench": "config_error", "seconds": {k: round(v, 2) for k, v in seconds.items()},
                      "under_3s": sorted(k for k, v in seconds.items() if v < 3), "machine": machine()}))  # fmt: skip


if __name__ == "__main__":
    main()
