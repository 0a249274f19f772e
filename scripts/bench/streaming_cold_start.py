"""Cold start at scale: ours and mosaicml-streaming side by side, from constructing ``StreamingDataset`` to the
first sample, over a 10-stream dataset with 500k shards in total.

Design note: both libraries import as ``streaming``, so each measurement runs in a fresh child process of this
script (``--child``): with the project's python for ours, with ``--ref-python`` (the venv of
``shared/bench/setup_reference.sh``) for the reference. The driver generates the data once with our writer: a
few real MDS shards (``ndarray:int32`` token samples, uncompressed), then per stream an ``index.json`` whose
entries have the shape the convert scripts write (column names/encodings/sizes, compression, hashes,
raw_data/zip_data, samples, size_limit, version) and one hard link per entry to a real shard (ext4 allows
65000 links per file, so the real shards are many enough). Each child times ``StreamingDataset(streams=[...],
shuffle=True, batch_size=...)`` plus ``next(iter(ds))`` and reports its peak RSS (``ru_maxrss``) and how much
that grew over the RSS after the imports (``import_s`` is reported apart: both import torch). The ``ranks8``
runs start 8 children at once with ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``/``LOCAL_WORLD_SIZE`` of one node
and report the max and median over ranks; ``first_sample_cpu_s`` is the CPU time of the rank's own process over
the same span (``process_time``): on a machine with fewer cores than ranks the wall time mostly measures the
other ranks' work, the CPU time does not. ``--ref-ranks`` limits the reference to some rank counts (at 8 ranks
x 500k shards it needs 8 x 4.5 GB). The ranks of one run wait for each other after their imports (a file
barrier), so every rank's figures cover all ranks constructing at once and none another rank's imports.
Ours is measured twice: ``nocache`` (its binary index cache removed first: the first start on a node, which
builds it) and warm (every later start). Rounds alternate ours and the
reference (order flipped each round); lines carry medians. Without ``--ref-python``: ours alone, said so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

_IMPORT_START = time.perf_counter()
import streaming  # noqa: E402 - ours in the driver and our children; mosaicml-streaming in the reference's
from streaming import Stream, StreamingDataset  # noqa: E402

IMPORT_S = time.perf_counter() - _IMPORT_START

STREAMS = 10
REAL_SHARDS = 16  # 500k links / 16 files < ext4's 65000 links per file
TOKENS = 256
BATCH = 8


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def write_real_shards(path: str) -> list[dict[str, Any]]:
    """A few real uncompressed MDS shards (our writer); returns their index entries."""
    import numpy as np

    from streaming import MDSWriter

    rng = np.random.default_rng(0)
    with MDSWriter(out=path, columns={"tokens": f"ndarray:int32:{TOKENS}"}, size_limit=1 << 17) as w:
        for _ in range(REAL_SHARDS * 130):
            w.write({"tokens": rng.integers(0, 50_000, TOKENS, dtype=np.int32)})
    with open(os.path.join(path, "index.json")) as f:
        entries = json.load(f)["shards"]
    assert len(entries) >= REAL_SHARDS, len(entries)
    return entries[:REAL_SHARDS]


def generate(root: str, total_shards: int) -> None:
    """``root/s{k}/index.json`` for ``STREAMS`` streams of ``total_shards`` shards in all, hard-linked files."""
    real_dir = os.path.join(root, "real")
    real = write_real_shards(real_dir)
    per_stream = total_shards // STREAMS
    for s in range(STREAMS):
        folder = os.path.join(root, f"s{s}")
        os.makedirs(folder)
        shards = []
        for k in range(per_stream):
            src = real[(s * per_stream + k) % len(real)]
            name = f"shard.{k:06d}.mds"
            entry = dict(src)
            entry["raw_data"] = {"basename": name, "bytes": src["raw_data"]["bytes"], "hashes": {}}
            entry["zip_data"] = None
            shards.append(entry)
            os.link(os.path.join(real_dir, src["raw_data"]["basename"]), os.path.join(folder, name))
        with open(os.path.join(folder, "index.json"), "w") as f:
            json.dump({"shards": shards, "version": 2}, f, sort_keys=True)


def _barrier(folder: str, world: int) -> None:
    """Wait until ``world`` processes have reached this point (each leaves a file in ``folder``)."""
    open(os.path.join(folder, str(os.getpid())), "w").close()
    while len(os.listdir(folder)) < world:
        time.sleep(0.005)


def run_child(root: str) -> dict[str, Any]:
    """One rank: construct the dataset over every stream of ``root`` and read its first sample."""
    barrier = os.environ.get("COLD_START_BARRIER")
    if barrier:
        _barrier(barrier, int(os.environ["WORLD_SIZE"]))
    rss0 = _rss_mb()
    folders = sorted(d for d in os.listdir(root) if d.startswith("s"))
    start, cpu = time.perf_counter(), time.process_time()
    streams = [Stream(local=os.path.join(root, d)) for d in folders]
    ds = StreamingDataset(streams=streams, shuffle=True, batch_size=BATCH)
    constructed = time.perf_counter() - start
    sample = next(iter(ds))
    first, first_cpu = time.perf_counter() - start, time.process_time() - cpu
    assert len(sample["tokens"]) == TOKENS
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "construct_s": round(constructed, 3),
        "first_sample_s": round(first, 3),
        "first_sample_cpu_s": round(first_cpu, 3),
        "peak_rss_mb": round(peak, 1),
        "rss_added_mb": round(peak - rss0, 1),
        "import_s": round(IMPORT_S, 3),
        "version": getattr(streaming, "__version__", "ours"),
    }


def ranks(python: str, root: str, world: int) -> list[dict[str, Any]]:
    """``world`` children at once, as the ranks of one node."""
    env = dict(os.environ)
    if python != sys.executable:  # the reference must not see a PYTHONPATH meant for ours
        env.pop("PYTHONPATH", None)
    env["COLD_START_BARRIER"] = tempfile.mkdtemp(prefix="barrier_", dir=root)
    procs = []
    for rank in range(world):
        env_r = dict(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
        env_r.update(LOCAL_WORLD_SIZE=str(world), NODE_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29531")
        cmd = [python, os.path.abspath(__file__), "--child", "--root", root]
        procs.append(
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_r)
        )
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"child with {python} failed (exit {p.returncode}):\n{stderr[-4000:]}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    shutil.rmtree(env["COLD_START_BARRIER"], ignore_errors=True)
    return out


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("construct_s", "first_sample_s", "first_sample_cpu_s", "peak_rss_mb", "rss_added_mb", "import_s")
    if len(results) == 1:
        return {k: results[0][k] for k in keys}
    out: dict[str, Any] = {}
    for k in keys:
        values = [r[k] for r in results]
        out[f"{k}_max"], out[f"{k}_median"] = max(values), round(statistics.median(values), 3)
    return out


def remove_our_cache(cache: str) -> None:
    shutil.rmtree(cache, ignore_errors=True)


def median_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}


def measure_case(root: str, world: int, rounds: int, ref_python: str | None, cache: str) -> dict[str, Any]:
    """Ours (index cache removed first, then warm) and the reference, alternating per round; medians."""
    runs: dict[str, list[dict[str, Any]]] = {"ours_nocache": [], "ours": [], "reference": []}
    for r in range(rounds):
        order = ["ours", "reference"] if r % 2 == 0 else ["reference", "ours"]
        for who in order:
            if who == "reference":
                if ref_python is not None:
                    runs["reference"].append(summarize(ranks(ref_python, root, world)))
                continue
            remove_our_cache(cache)
            runs["ours_nocache"].append(summarize(ranks(sys.executable, root, world)))
            runs["ours"].append(summarize(ranks(sys.executable, root, world)))
    return {who: median_runs(res) for who, res in runs.items() if res}


def speedup(ours: dict[str, Any], ref: dict[str, Any]) -> dict[str, float]:
    """ref/ours for every time and memory figure: > 1 means ours is faster or smaller."""
    return {
        k: round(ref[k] / v, 2) for k, v in ours.items() if k in ref and v > 0 and not k.startswith("import")
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref-python", default=os.environ.get("STREAMING_REF_PYTHON"))
    parser.add_argument("--quick", action="store_true", help="50k shards instead of 500k")
    parser.add_argument("--shards", type=int, default=None, help="total shards (default 500000; 50000 quick)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ranks", default="1,8", help="rank counts to run, e.g. 1,8")
    parser.add_argument(
        "--ref-ranks", default=None, help="rank counts to run the reference at (default: all of --ranks)"
    )
    parser.add_argument("--root", default=None, help="data directory (default: a temp dir, removed)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.root)))
        return 0
    total = args.shards or (50_000 if args.quick else 500_000)
    if args.ref_python is None:
        print(
            "streaming_cold_start: no --ref-python given: ours alone, no reference figures", file=sys.stderr
        )
    root = args.root or tempfile.mkdtemp(prefix="streaming_cold_")
    cache = os.path.join(root, "_cache")
    os.environ["STREAMING_CACHE"] = cache  # our index cache (and nothing else) goes here
    try:
        if not os.path.exists(os.path.join(root, "s0", "index.json")):
            t = time.perf_counter()
            generate(root, total)
            print(
                f"streaming_cold_start: generated {total} shards in {time.perf_counter() - t:.1f} s",
                file=sys.stderr,
            )
        from _common import machine

        info = machine()
        label = f"{total // 1000}k"
        ref_worlds = None if args.ref_ranks is None else {int(w) for w in args.ref_ranks.split(",") if w}
        for world in [int(w) for w in args.ranks.split(",")]:
            skip_ref = ref_worlds is not None and world not in ref_worlds
            res = measure_case(root, world, args.rounds, None if skip_ref else args.ref_python, cache)
            line: dict[str, Any] = {
                "bench": "streaming_read",
                "case": f"cold_start_{label}_r{world}",
                "shards": total,
                "streams": STREAMS,
                "ranks": world,
                "rounds": args.rounds,
                "ours": res["ours"],
                "ours_nocache": res["ours_nocache"],
                "reference": res.get("reference"),
            }
            if line["reference"] is None and skip_ref and args.ref_python:
                line["note"] = f"reference not run at {world} ranks (--ref-ranks); ours alone"
            elif line["reference"] is None:
                line["note"] = "reference not run (pass --ref-python); ours alone"
            else:
                line["speedup"] = speedup(res["ours"], res["reference"])
            line["machine"] = info
            print(json.dumps(line), flush=True)
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
