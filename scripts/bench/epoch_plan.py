"""Epoch-plan benchmark: time and peak extra memory until one worker can yield its first sample.

Cases (one JSON line each, with machine info; every case runs in a fresh subprocess so peak RSS is clean):
- ``plan``: pure ``streaming.plan`` from shard sizes (8192-sample shards) to one worker's first batch, for
  1e6 / 1e7 / 1e8 samples and every shuffle algorithm (plus no shuffle), world 1 node x 8 ranks x 8 workers.
- ``dataset``: a real ``StreamingDataset`` over a synthetic local dataset of N samples (one written shard,
  hard-linked as every shard) from construction to the first sample.
- ``resume``: ``load_state_dict`` at 90% of the epoch, then the first sample (in-process, and through a
  2-worker ``StreamingDataLoader``).

Usage: ``python scripts/bench/epoch_plan.py [--sizes 1e6,1e7,1e8] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

SHARD = 8192
ALGOS = ["py1e", "py1br", "py1s", "py2s", "naive", "none"]
# mosaicml-streaming 0.13.0 on this machine type (../shared/docs/perf_anchors.md): whole-world plan, seconds
REFERENCE_S = {
    "py1e": {1e6: 0.20, 1e7: 2.5, 1e8: 27.8},
    "py1br": {1e6: 0.05, 1e7: 0.95, 1e8: 11.4},
    "py1s": {1e6: 0.06, 1e7: 1.1, 1e8: 10.1},
    "none": {1e6: 0.02, 1e7: 0.72, 1e8: 5.6},
}


def machine() -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def case_plan(n: int, algo: str) -> dict[str, Any]:
    from streaming.plan import PlanSpec, WorkerPlan, epoch_order

    base = _rss_mb()
    t0 = time.perf_counter()
    sizes = (SHARD,) * (n // SHARD) + ((n % SHARD,) if n % SHARD else ())
    spec = PlanSpec(
        shard_sizes=sizes,
        shards_per_stream=(len(sizes),),
        choose_per_stream=(n,),
        num_canonical_nodes=1,
        shuffle=algo != "none",
        shuffle_algo="py1e" if algo == "none" else algo,
    )
    order = epoch_order(spec, 0)
    plan = WorkerPlan(
        order=order, drop_first=0, num_devices=8, device=3, batch_size=32, num_workers=8, worker=5
    )
    first = next(plan.batches())
    secs = time.perf_counter() - t0
    assert len(first) == 32
    return {"first_batch_s": round(secs, 4), "peak_extra_mb": round(_rss_mb() - base, 1)}


def make_dataset(n: int, root: str) -> str:
    """A local dataset of n samples: one real 8192-sample shard hard-linked as every full shard."""
    from streaming import MDSWriter

    path = os.path.join(root, f"ds{n}")
    if os.path.exists(os.path.join(path, "index.json")):
        return path
    parts = {}
    for name, count in (("full", SHARD), ("tail", n % SHARD)):
        if count:
            with MDSWriter(
                out=os.path.join(root, f"{name}{n}"), columns={"id": "int"}, size_limit=1 << 30
            ) as w:
                for i in range(count):
                    w.write({"id": i})
            parts[name] = json.load(open(os.path.join(root, f"{name}{n}", "index.json")))["shards"][0]
    os.makedirs(path)
    shards = []
    for k in range(-(-n // SHARD)):
        name = "tail" if (k == n // SHARD) else "full"
        entry = json.loads(json.dumps(parts[name]))
        basename = f"shard.{k:06}.mds"
        os.link(
            os.path.join(root, f"{name}{n}", parts[name]["raw_data"]["basename"]),
            os.path.join(path, basename),
        )
        entry["raw_data"]["basename"] = basename
        shards.append(entry)
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump({"shards": shards, "version": 2}, f)
    return path


def case_dataset(n: int, root: str, resume: bool, workers: int) -> dict[str, Any]:
    from streaming.loader.dataloader import StreamingDataLoader
    from streaming.reader.dataset import StreamingDataset

    path = make_dataset(n, root)
    state = None
    if resume:
        probe = StreamingDataset(local=path, batch_size=32, shuffle=True)
        state = probe.state_dict(num_samples=int(0.9 * n), from_beginning=True)
        del probe
    base = _rss_mb()
    t0 = time.perf_counter()
    ds = StreamingDataset(local=path, batch_size=32, shuffle=True)
    t_build = time.perf_counter() - t0
    t1 = time.perf_counter()
    if state is not None:
        ds.load_state_dict(state)
    if workers:
        loader = StreamingDataLoader(ds, batch_size=32, num_workers=workers)
        first = next(iter(loader))["id"]
    else:
        first = next(iter(ds))["id"]
    t_first = time.perf_counter() - t1
    assert first is not None
    return {
        "construct_s": round(t_build, 4),
        ("load_state_to_first_sample_s" if resume else "iter_to_first_sample_s"): round(t_first, 4),
        "total_s": round(t_build + t_first, 4),
        "peak_extra_mb_rank_process": round(_rss_mb() - base, 1),
    }


def run_one(args: argparse.Namespace) -> None:
    n = int(float(args.n))
    if args.case == "plan":
        out = case_plan(n, args.algo)
        ref = REFERENCE_S.get(args.algo, {}).get(float(n))
        head = {"bench": "epoch_plan", "case": "plan", "samples": n, "algo": args.algo, "world": "1x8x8"}
        if ref is not None:
            out["reference_whole_world_s"] = ref
    else:
        out = case_dataset(n, args.root, args.case == "resume", args.workers)
        head = {
            "bench": "epoch_plan",
            "case": args.case,
            "samples": n,
            "algo": "py1e",
            "workers": args.workers,
        }
    print(json.dumps({**head, **out, "machine": machine()}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7,1e8")
    ap.add_argument("--quick", action="store_true", help="only the default algorithm and no dataset cases")
    ap.add_argument("--case", choices=["plan", "dataset", "resume"], help=argparse.SUPPRESS)
    ap.add_argument("--n", help=argparse.SUPPRESS)
    ap.add_argument("--algo", default="py1e", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        run_one(args)
        return
    sizes = args.sizes.split(",")
    me = [sys.executable, os.path.abspath(__file__)]
    jobs = [
        ["--case", "plan", "--n", n, "--algo", a] for n in sizes for a in (["py1e"] if args.quick else ALGOS)
    ]
    with tempfile.TemporaryDirectory() as root:
        if not args.quick:
            for n in sizes:
                jobs.append(["--case", "dataset", "--n", n, "--root", root])
            for w in (0, 2):
                jobs.append(["--case", "resume", "--n", "1e7", "--root", root, "--workers", str(w)])
        for job in jobs:
            subprocess.run([*me, *job], check=True)


if __name__ == "__main__":
    main()
