"""Read-path benchmark: ours and mosaicml-streaming side by side, through the API users run.

Design note: both libraries are importable as ``streaming``, so they cannot share a process. The driver
(this script, run with the project's python) writes every dataset once with our ``MDSWriter`` (MDS is
byte-compatible, so both libraries read the same files), then runs each measurement in a fresh child
process of this same script: ``--child CASE`` with the project's python measures ours, with
``--ref-python`` (the venv built by ``shared/bench/setup_reference.sh``) the reference. For each case the
two alternate within every round (the order flips each round) and the line reports the median over rounds,
so both see the same machine load. Timers run inside the children (interpreter start-up is excluded),
after a full garbage collection.
No fixed historical figures: without a reference python the lines hold ours alone and say so.

Cases (one JSON line each; ``speedup`` > 1 means ours is faster):
  * ``loader_tok8k_w{0,2,4}``: ``StreamingDataset`` (py1e shuffle) + ``StreamingDataLoader``, batch 32,
    default collate, ``ndarray:int32:2048`` token samples (8 KiB), 0/2/4 workers: steady samples/s after
    the first batch, and the time to the first batch.
  * ``loader_small64_w2``: the same with ~64-byte ``str`` samples and 2 workers.
  * ``random_tok8k``: ``get_item`` at uniform random indices (warm page cache): p50 and mean us.
  * ``zstd_tok8k``: a zstd-compressed copy, raw shards removed before every run: time from constructing
    ``StreamingDataset`` to its first shuffled sample (in process; wall and CPU seconds), then the steady
    samples/s; ``import_s`` (importing the library, not in ``first_sample_s``) beside it, since each library
    defers different work to first use. Ours reads the first sample while its shard is still being
    decompressed (in the remote case: downloaded), so both first-sample figures depend on where that sample
    lies in its shard: seed 7 puts it 14% in (sample 295 of 2044 of shard 25); at a shard's end ours too
    waits for the whole shard.
  * ``collate_tok8k_w{0,2}``: ours: the loader ``train.py`` runs, built by ``foundry.data.text.build_text_dataloader``
    (``TextLoader`` + ``TextCollator``: ``input_ids`` and ``labels`` int64 tensors; workers collate whole
    batches of narrow ids into shared-memory slots, the rank process widens), 0/2 workers, the same py1e shuffle, seed and batch; the reference: its
    ``StreamingDataLoader`` with the default collate of the same samples (llm-foundry's text loader is a
    separate package).
    A last line, ``collate_tok8k_w2_over_w0``, divides ours with 2 workers by ours in process (issue 14's >= 0.5).
  * ``remote_tok8k_w2``: the token dataset served by a loopback S3 server (``_read_remote.py``; skipped with a
    message when moto is not installed): first shuffled sample from a cold cache vs one shard's download, then
    2-worker samples/s once every shard is cached vs the local copy in the same child.
  * ``cold_start``: ``streaming_cold_start.py`` (10 streams, 500k shards; 50k with ``--quick``): construction to
    the first shuffled sample on 1 rank and on 8 ranks of a node at once, wall, CPU and RSS per rank.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _common import machine
from _read_remote import LoopbackS3, S3Unavailable, measure_remote

_IMPORT_START = time.perf_counter()
import streaming  # noqa: E402 - ours in the driver and our children; mosaicml-streaming in the reference's
from streaming import StreamingDataLoader, StreamingDataset  # noqa: E402

IMPORT_S = time.perf_counter() - _IMPORT_START
REPO = Path(__file__).resolve().parents[2]

TOKENS = 2048  # int32 tokens per sample: 8 KiB
BATCH = 32
SHARD_BYTES = 1 << 24  # 16 MiB shards: ~2k token samples each
SIZES = {"full": {"tok8k": 60_000, "small64": 600_000}, "quick": {"tok8k": 6_000, "small64": 60_000}}
LOADER_CASES = {
    "loader_tok8k_w0": ("tok8k", 0),
    "loader_tok8k_w2": ("tok8k", 2),
    "loader_tok8k_w4": ("tok8k", 4),
    "loader_small64_w2": ("small64", 2),
}
COLLATE_CASES = {"collate_tok8k_w0": 0, "collate_tok8k_w2": 2}
CASES = (*LOADER_CASES, "random_tok8k", "zstd_tok8k", *COLLATE_CASES, "remote_tok8k_w2", "cold_start")
"""`cold_start` runs streaming_cold_start.py (10 streams, 500k shards; 50k with --quick; 1 and 8 ranks, the
reference at 1 rank only at 500k: 8 x 4.5 GB does not fit) and passes its JSON lines through."""
RATE_KEYS = {"samples_per_s", "local_samples_per_s"}
TIME_KEYS = {
    "first_batch_s",
    "first_sample_s",
    "first_sample_cpu_s",
    "iter_first_sample_s",
    "iter_first_cpu_s",
    "p50_us",
    "mean_us",
    "import_s",
}


# ----- data (driver, ours) -----


def write_tokens(path: str, n: int, compression: str | None) -> None:
    """``n`` samples of 2048 int32 token ids below 50k (compressible like real token data)."""
    # The driver only: importing our writers in a child measurably slows its first zstd sample (to be found
    # out), and a training job does not import them.
    from streaming import MDSWriter

    rng = np.random.default_rng(0)
    columns = {"tokens": f"ndarray:int32:{TOKENS}", "id": "int"}
    with MDSWriter(out=path, columns=columns, compression=compression, size_limit=SHARD_BYTES) as w:
        for start in range(0, n, 1024):
            block = rng.integers(0, 50_000, size=(min(1024, n - start), TOKENS), dtype=np.int32)
            for j, row in enumerate(block):
                w.write({"tokens": row, "id": start + j})


def write_small(path: str, n: int) -> None:
    """``n`` samples of ~64-byte text (seven 8-hex-digit words and a counter)."""
    # The driver only: importing our writers in a child measurably slows its first zstd sample (to be found
    # out), and a training job does not import them.
    from streaming import MDSWriter

    words = [f"{w:08x}" for w in np.random.default_rng(0).integers(0, 2**32, size=4096).tolist()]
    with MDSWriter(out=path, columns={"text": "str"}, size_limit=SHARD_BYTES) as w:
        for i in range(n):
            j = i % 4089
            w.write({"text": " ".join(words[j : j + 7]) + f" {i:07d}"})


def remove_raw_shards(path: str) -> None:
    """Leave only the compressed shards, so the next run decompresses from scratch."""
    for f in glob.glob(os.path.join(path, "shard.*.mds")):
        os.remove(f)


# ----- measurements (children; the same code runs against either library) -----


def _dataset(*, shuffle: bool, **where: Any) -> Any:
    """The benchmark's ``StreamingDataset`` at ``local=`` (and ``remote=``): py1e, seed 7, batch 32."""
    return StreamingDataset(**where, batch_size=BATCH, shuffle=shuffle, shuffle_algo="py1e", shuffle_seed=7)


def measure_loader(
    ds: Any, workers: int, seconds: float, collate_fn: Callable[..., Any] | None = None
) -> dict[str, float]:
    kwargs = {} if collate_fn is None else {"collate_fn": collate_fn}
    return time_loader(StreamingDataLoader(ds, batch_size=BATCH, num_workers=workers, **kwargs), seconds)


def time_loader(loader: Any, seconds: float) -> dict[str, float]:
    """Steady samples/s after the first batch, and the time from ``iter(loader)`` to the first batch."""
    start = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter()
    count = 0
    for batch in it:
        count += len(next(iter(batch.values())))
        if time.perf_counter() - first >= seconds:
            break
    rate = count / (time.perf_counter() - first)
    del it
    return {"samples_per_s": rate, "first_batch_s": first - start}


def measure_collate(path: str, workers: int, seconds: float) -> dict[str, float]:
    """``workers`` workers: ours through ``build_text_dataloader`` (as ``train.py`` builds it: the same dataset settings
    as ``_dataset``), the reference through its default collate (llm-foundry's collator is a separate package)."""
    if not Path(streaming.__file__).resolve().is_relative_to(REPO):
        return measure_loader(_dataset(local=path, shuffle=True), workers, seconds)
    # ours only; foundry is not in the reference's venv
    from foundry.data.config import TextDataConfig
    from foundry.data.text import build_text_dataloader
    from streaming.reader.world import World

    cfg = TextDataConfig(local=os.path.dirname(path), train_split=os.path.basename(path), num_workers=workers)
    loader = build_text_dataloader(
        cfg, tokenizer=None, device_batch_size=BATCH, world=World(), max_seq_len=TOKENS, seed=7,
        vocab_size=50_304,
    )  # fmt: skip
    assert loader.dataset.shuffle_algo == "py1e" and loader.dataset.shuffle_seed == 7
    return time_loader(loader, seconds)


def measure_random(path: str, seconds: float) -> dict[str, float]:
    ds = _dataset(local=path, shuffle=False)
    get = ds.get_item
    idx = np.random.default_rng(1).integers(0, len(ds), size=200_000).tolist()
    for i in idx[:2000]:  # warm: map shards, parse offset tables
        get(i)
    clock, times = time.perf_counter_ns, []
    stop = clock() + int(seconds * 1e9)
    for i in idx:
        t0 = clock()
        get(i)
        times.append(clock() - t0)
        if t0 > stop:
            break
    return {
        "p50_us": float(np.median(times)) / 1e3,
        "mean_us": float(np.mean(times)) / 1e3,
        "draws": len(times),
    }


def measure_zstd(path: str, seconds: float) -> dict[str, float]:
    start, cpu = time.perf_counter(), time.process_time()
    it = iter(_dataset(local=path, shuffle=True))
    next(it)
    first = time.perf_counter()
    cpu = time.process_time() - cpu  # every thread's: robust to a loaded machine, counts background work
    count = 0
    for _ in it:
        count += 1
        if count % 256 == 0 and time.perf_counter() - first >= seconds:
            break
    rate = count / (time.perf_counter() - first)
    return {
        "first_sample_s": first - start,
        "first_sample_cpu_s": cpu,
        "samples_per_s": rate,
        "import_s": IMPORT_S,
    }


def run_child(case: str, root: str, seconds: float, remote: str | None) -> dict[str, Any]:
    # The imports leave a full collection pending (~0.07 s on this machine); it fell inside whichever
    # library's timed window came first (measured: the zstd first sample's construction), so both start clean.
    gc.collect()
    tok8k = os.path.join(root, "tok8k")
    if case in LOADER_CASES:
        data, workers = LOADER_CASES[case]
        result = measure_loader(_dataset(local=os.path.join(root, data), shuffle=True), workers, seconds)
    elif case == "random_tok8k":
        result = measure_random(tok8k, seconds)
    elif case in COLLATE_CASES:
        result = measure_collate(tok8k, COLLATE_CASES[case], seconds)
    elif case == "remote_tok8k_w2":
        assert remote is not None, "the driver passes --remote"
        result = measure_remote(remote, tok8k, seconds, _dataset, measure_loader)
    else:
        result = measure_zstd(os.path.join(root, "tok8k_zstd"), seconds)
    return {
        "library": os.path.dirname(streaming.__file__),
        "version": getattr(streaming, "__version__", "this repository"),
        **result,
    }


# ----- driver -----


@dataclass
class Setup:
    """What a case needs from the driver: a step before every child run, and the children's extra arguments
    and environment (the remote case's server)."""

    before: Callable[[], None] = lambda: None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def child(python: str, case: str, root: str, seconds: float, setup: Setup) -> dict[str, Any]:
    cmd = [python, os.path.abspath(__file__), "--child", case, "--root", root, "--seconds", str(seconds)]
    env = {**os.environ, **setup.env}
    if python != sys.executable:  # the reference must not see a PYTHONPATH meant for ours
        env.pop("PYTHONPATH", None)
    proc = subprocess.run([*cmd, *setup.args], capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{case} with {python} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def side_by_side(
    case: str, root: str, seconds: float, rounds: int, ref_python: str | None, setup: Setup
) -> dict[str, Any]:
    """Run ``case`` for ours and the reference, alternating (order flipped each round); medians per metric."""
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "reference": []}
    pythons = {"ours": sys.executable, "reference": ref_python}
    for r in range(rounds):
        order = ["ours", "reference"] if r % 2 == 0 else ["reference", "ours"]
        for who in order:
            python = pythons[who]
            if python is not None:
                setup.before()
                runs[who].append(child(python, case, root, seconds, setup))
    out: dict[str, Any] = {}
    for who, results in runs.items():
        if results:
            keys = [k for k, v in results[0].items() if isinstance(v, int | float)]
            out[who] = {k: round(statistics.median(r[k] for r in results), 4) for k in keys}
            out[who]["version"] = results[0]["version"]
    return out


def speedup(ours: dict[str, float], ref: dict[str, float]) -> dict[str, float]:
    """ours/ref for rates, ref/ours for times: > 1 means ours is faster."""
    out = {}
    for key, value in ours.items():
        if key in ref and key in RATE_KEYS | TIME_KEYS and value > 0 and ref[key] > 0:
            out[key] = round(ref[key] / value if key in TIME_KEYS else value / ref[key], 2)
    return out


def prepare_data(root: str, size: str) -> None:
    n = SIZES[size]
    for name, write in (
        ("tok8k", lambda p: write_tokens(p, n["tok8k"], None)),
        ("tok8k_zstd", lambda p: write_tokens(p, n["tok8k"], "zstd")),
        ("small64", lambda p: write_small(p, n["small64"])),
    ):
        path = os.path.join(root, name)
        if not os.path.exists(os.path.join(path, "index.json")):
            write(path)


def case_setup(case: str, root: str, stack: ExitStack) -> Setup:
    """The driver-side preparation of ``case`` (raises ``S3Unavailable`` for the remote case without moto)."""
    if case.startswith("zstd"):
        return Setup(before=lambda: remove_raw_shards(os.path.join(root, "tok8k_zstd")))
    if case.startswith("remote"):
        s3 = stack.enter_context(LoopbackS3())
        remote = s3.upload(os.path.join(root, "tok8k"), "tok8k")
        return Setup(args=("--remote", remote), env=s3.env())
    return Setup()


def run_case(case: str, root: str, seconds: float, rounds: int, ref_python: str | None) -> dict[str, Any]:
    """One JSON line: ours and the reference (or a note), the speedup, or why the case was skipped."""
    line: dict[str, Any] = {"bench": "streaming_read", "case": case, "rounds": rounds, "seconds": seconds}
    with ExitStack() as stack:
        try:
            setup = case_setup(case, root, stack)
        except S3Unavailable as err:
            print(f"streaming_read: {case} skipped: {err}", file=sys.stderr)
            return {**line, "skipped": str(err)}
        res = side_by_side(case, root, seconds, rounds, ref_python, setup)
    line["ours"] = res["ours"]
    line["reference"] = res.get("reference")
    if line["reference"] is None:
        line["note"] = "reference not run (pass --ref-python); ours alone"
    else:
        line["speedup"] = speedup(res["ours"], res["reference"])
    return line


def run_cold_start(ref_python: str | None, *, quick: bool) -> None:
    """The cold-start case, in its own script (its data is generated apart, and it runs ranks in parallel)."""
    cmd = [sys.executable, str(Path(__file__).with_name("streaming_cold_start.py")), "--ranks", "1,8"]
    cmd += ["--quick"] if quick else ["--ref-ranks", "1"]
    if ref_python:
        cmd += ["--ref-python", ref_python]
    subprocess.run(cmd, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ref-python",
        default=os.environ.get("STREAMING_REF_PYTHON"),
        help="python of a venv with mosaicml-streaming (or $STREAMING_REF_PYTHON)",
    )
    parser.add_argument("--quick", action="store_true", help="CI size: small data, 1 round, 1 s per run")
    parser.add_argument(
        "--rounds", type=int, default=None, help="rounds per case (default 3; 1 with --quick)"
    )
    parser.add_argument("--seconds", type=float, default=None, help="measured seconds per run (default 3)")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--root", default=None, help="data directory (default: a temp dir, removed)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--remote", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    seconds = args.seconds if args.seconds is not None else (1.0 if args.quick else 3.0)
    if args.child:
        print(json.dumps(run_child(args.child, args.root, seconds, args.remote)))
        return 0
    rounds = args.rounds or (1 if args.quick else 3)
    if args.ref_python is None:
        print("streaming_read: no --ref-python given: ours alone, no reference figures", file=sys.stderr)
    root = args.root or tempfile.mkdtemp(prefix="streaming_bench_")
    try:
        prepare_data(root, "quick" if args.quick else "full")
        info = machine()
        done: dict[str, dict[str, Any]] = {}
        for case in args.cases.split(","):
            if case == "cold_start":
                run_cold_start(args.ref_python, quick=args.quick)
                continue
            line = done[case] = run_case(case, root, seconds, rounds, args.ref_python)
            print(json.dumps({**line, "machine": info}), flush=True)
        pair = ("collate_tok8k_w0", "collate_tok8k_w2")  # issue 14: 2 workers at >= 50% of in process
        if set(pair) <= done.keys():
            w0, w2 = (done[c]["ours"]["samples_per_s"] for c in pair)
            print(json.dumps({"bench": "streaming_read", "case": "collate_tok8k_w2_over_w0", "ours": round(w2 / w0, 3),
                              "target": 0.5, "machine": info}), flush=True)  # fmt: skip
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
