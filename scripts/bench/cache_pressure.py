"""Shared shard cache under pressure: N jobs x W workers, small shards, a tight `cache_limit`, remote on loopback S3.

Every job is a separate process (`--job`) streaming the same remote dataset through one shared cache folder with
its own shuffle seed, so the jobs want different shards at the same time; each checks every sample's bytes
against its id and that every id came exactly once per epoch. A sampler in this process measures the cache's
disk use every 10 ms: the shard files in the folder (finished and temporary; not index.json and the `.locks`
folder, which the limit does not cover) plus the files already unlinked (evicted) that a job or one of its workers
still holds open or mapped (found through /proc/<pid>/fd and /proc/<pid>/map_files), each inode counted once.

Jobs shuffle with py1e over blocks of `--shuffle-block-size` samples (default 128, about 4 shards), the
setting a user with a cache smaller than the dataset chooses: the library default (`0`) shuffles a dataset this
small as one block, so every shard is in use at once and any limit below the dataset size must fetch shards
again for most batches, whatever the cache does.

Passes over the same data, each into a fresh cache folder:
- `unlimited`: no `cache_limit` (the throughput baseline; it also measures how many shards a batch touches);
- `unlimited_private`: no `cache_limit`, each job its own cache folder (a second baseline: every job downloads
  every shard itself, as a shared cache too small to keep a shard until the jobs with other orders reach it
  must; the cost of a small limit against it is the cost of the cache's bookkeeping, not of lost sharing);
- `two_batches`: the limit holds two batches of shards for every job at once (target: < 10% slower than
  unlimited; reported against both baselines);
- `tight`: the smallest limit the dataset accepts (4 shards), the stress case.
Targets in every limited pass: max disk / limit <= 1.0, no hang (a job still running after `--job-timeout` is
killed and counted), no crash (a non-zero exit), no sample wrong or missing.

The jobs reach the store through the benchmark's proxy (`_shaping_proxy`), which counts the GETs of each pass
(`gets`: shard downloads, direct range reads of a first batch and the jobs' index.json) and serves the
uploaded objects from memory, as a real store costs this machine no CPU per request (moto, on the same two
cores, took ~5 ms of CPU a GET); `--latency-ms` and `--mb-per-s` add a round trip per request and a
bandwidth cap per connection (the remote benchmark's conditions: `--latency-ms 30 --mb-per-s 50`).
`--repeats N` runs the passes N times, alternating, and the summary takes each pass's medians. The summary
also gives, for each limited pass, the shard downloads Belady's rule makes for these jobs'
plans (`best_possible_downloads`, `_cache_bound`: Belady's rule with the readers in step), to set the
measured GETs against (those also count ~6 per reader that are not whole-shard downloads: index.json and
the first batch's direct range reads; the unlimited pass shows them above its one download per shard), and
`two_batches_floor_cost`: the cost those downloads would bring on their own at what a download costs
this machine without a limit (the cache-per-job pass's extra seconds over its extra GETs), the floor under
which no cache's bookkeeping could bring the two-batches cost on these cores.

Usage: `python scripts/bench/cache_pressure.py [--jobs 3] [--workers 2] [--samples 6000] [--epochs 2]
[--latency-ms 0] [--mb-per-s 0] [--repeats 1]`. Prints one JSON line per pass and round, and a summary line with
the machine and its load average.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from _cache_bound import best_possible_downloads, reader_batches
from _common import machine
from _shaping_proxy import ShapingProxy
from streaming_remote import start_moto

SAMPLE_BYTES = 1000


def sample_bytes(i: int) -> bytes:
    """The content of sample `i`: its id, then a byte that depends on it, repeated (checkable in O(1) numpy)."""
    return int(i).to_bytes(8, "little") + bytes([(i * 7) % 251]) * (SAMPLE_BYTES - 8)


def check_sample(i: int, data: bytes) -> bool:
    if len(data) != SAMPLE_BYTES or int.from_bytes(data[:8], "little") != i:
        return False
    body = np.frombuffer(data, dtype=np.uint8, offset=8)
    return bool((body == (i * 7) % 251).all())


def write_dataset(remote: str, n: int, shard_bytes: int) -> None:
    from streaming import MDSWriter

    with MDSWriter(out=remote, columns={"id": "int", "data": "bytes"}, size_limit=shard_bytes) as w:
        for i in range(n):
            w.write({"id": i, "data": sample_bytes(i)})


# ---- one job (a subprocess) ----


def run_job(args: argparse.Namespace) -> None:
    from streaming import StreamingDataLoader, StreamingDataset

    ds = StreamingDataset(
        remote=args.remote,
        local=args.local,
        batch_size=args.batch_size,
        shuffle=True,
        shuffle_seed=args.seed,
        shuffle_block_size=args.shuffle_block_size or None,
        cache_limit=args.limit or None,
    )
    bounds = np.cumsum([s.samples for s in ds.shards])
    loader = StreamingDataLoader(ds, batch_size=args.batch_size, num_workers=args.workers)
    wrong = missing = duplicates = samples = 0
    shards_per_batch = 0
    start = time.perf_counter()
    for _ in range(args.epochs):
        seen = np.zeros(int(bounds[-1]), dtype=np.int32)
        for batch in loader:
            ids = [int(i) for i in batch["id"]]
            samples += len(ids)
            for i, data in zip(ids, batch["data"]):
                wrong += not check_sample(i, data)
                seen[i] += 1
            shards = np.unique(np.searchsorted(bounds, np.asarray(ids), side="right"))
            shards_per_batch = max(shards_per_batch, len(shards))
        missing += int((seen == 0).sum())
        duplicates += int((seen > 1).sum())
    seconds = time.perf_counter() - start
    result = dict(
        samples=samples,
        seconds=seconds,
        wrong=wrong,
        missing=missing,
        duplicates=duplicates,
        shards_per_batch=shards_per_batch,
    )
    Path(args.out).write_text(json.dumps(result))


# ---- the sampler ----


def _tree(pid: int) -> list[int]:
    import psutil

    try:
        proc = psutil.Process(pid)
        return [pid] + [c.pid for c in proc.children(recursive=True)]
    except psutil.Error:
        return []


def disk_bytes(folder: str, pids: list[int]) -> int:
    """Bytes of the shard files under `folder` (temp files included; not index.json nor the `.locks` folder of
    locks and hash verdicts, which `cache_limit` does not cover) plus unlinked files under it still open in
    or mapped by `pids`, each inode once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.endswith(".locks")]  # '.locks', or a private job's '.job-0.locks'
        for name in files:
            if name == "index.json":
                continue
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    for pid in pids:
        for kind in ("fd", "map_files"):  # open descriptors, and mappings whose descriptor was closed
            where = f"/proc/{pid}/{kind}"
            try:
                links = os.listdir(where)
            except OSError:
                continue
            for link in links:
                try:
                    target = os.readlink(f"{where}/{link}")
                    if (
                        not (target.startswith(folder) and target.endswith(" (deleted)"))
                        or "/.locks/" in target
                    ):
                        continue
                    st = os.stat(f"{where}/{link}")
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
    return total


class Sampler(threading.Thread):
    """Samples `disk_bytes` every `period` seconds until stopped; keeps the maximum and the sample count."""

    def __init__(self, folder: str, procs: list[subprocess.Popen], period: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.folder, self.procs, self.period = folder, procs, period
        self.max_bytes = self.samples = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            pids = [p for proc in self.procs if proc.poll() is None for p in _tree(proc.pid)]
            self.max_bytes = max(self.max_bytes, disk_bytes(self.folder, pids))
            self.samples += 1
            self.stop.wait(self.period)


# ---- one pass: N jobs on one cache ----


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def run_pass(
    name: str, args: argparse.Namespace, remote: str, scratch: str, limit: int | None, proxy: ShapingProxy
) -> dict[str, Any]:
    cache = os.path.realpath(os.path.join(scratch, f"cache-{name}"))
    os.makedirs(cache)
    private = name == "unlimited_private"  # each job its own folder under `cache` (lock folders skipped too)
    procs, outs = [], []
    proxy.reset()
    jobs_cpu, bench_cpu = _cpu_seconds(resource.RUSAGE_CHILDREN), _cpu_seconds(resource.RUSAGE_SELF)
    start = time.perf_counter()
    for j in range(args.jobs):
        out = os.path.join(scratch, f"{name}-{j}.json")
        local = os.path.join(cache, f"job-{j}") if private else cache
        cmd = [sys.executable, __file__, "--job", "--remote", remote, "--local", local, "--out", out]
        cmd += ["--seed", str(1000 + j), "--workers", str(args.workers), "--epochs", str(args.epochs)]
        cmd += ["--batch-size", str(args.batch_size), "--limit", str(limit or 0)]
        cmd += ["--shuffle-block-size", str(args.shuffle_block_size)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        outs.append(out)
    sampler = Sampler(cache, procs)
    sampler.start()
    hangs = crashes = 0
    errors: list[str] = []
    for proc in procs:
        left = args.job_timeout - (time.perf_counter() - start)
        try:
            _, err = proc.communicate(timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            hangs += 1
            for pid in reversed(_tree(proc.pid)):
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            proc.communicate()
            continue
        if proc.returncode != 0:
            crashes += 1
            errors.append(err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}")
    wall = time.perf_counter() - start
    jobs_cpu = _cpu_seconds(resource.RUSAGE_CHILDREN) - jobs_cpu  # the jobs and their (joined) workers
    bench_cpu = _cpu_seconds(resource.RUSAGE_SELF) - bench_cpu  # this process: the proxy and the disk sampler
    seen = proxy.reset()
    sampler.stop.set()
    sampler.join()
    results = [json.loads(Path(o).read_text()) for o in outs if os.path.exists(o)]
    samples = sum(r["samples"] for r in results)
    expected = args.jobs * args.epochs * args.samples
    row: dict[str, Any] = {
        "bench": "cache_pressure",
        "pass": name,
        "jobs": args.jobs,
        "workers": args.workers,
        "limit_bytes": limit,
        "shuffle_block_size": args.shuffle_block_size or "default",
        "samples_per_s": round(samples / wall, 1),
        "iter_samples_per_s": round(samples / max((r["seconds"] for r in results), default=math.inf), 1),
        "wall_s": round(wall, 2),
        "jobs_cpu_s": round(jobs_cpu, 2),
        "bench_cpu_s": round(bench_cpu, 2),
        "cpus_busy": round((jobs_cpu + bench_cpu) / wall, 2),
        "max_disk_bytes": sampler.max_bytes,
        "max_disk_over_limit": round(sampler.max_bytes / limit, 3) if limit else None,
        "disk_samples": sampler.samples,
        "hangs": hangs,
        "crashes": crashes,
        "wrong": sum(r["wrong"] for r in results),
        "missing": sum(r["missing"] for r in results)
        + (expected - samples if len(results) < args.jobs else 0),
        "duplicates": sum(r["duplicates"] for r in results),
        "max_shards_per_batch": max((r["shards_per_batch"] for r in results), default=0),
        "gets": seen.gets,
        "fetched_bytes": seen.body_bytes,
    }
    if errors:
        row["errors"] = errors[:3]
    shutil.rmtree(cache, ignore_errors=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--samples", type=int, default=6000)
    p.add_argument("--shard-bytes", type=int, default=32_000, help="MDS size_limit (~30 samples a shard)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument(
        "--shuffle-block-size",
        type=int,
        default=128,
        help="py1e block (samples): ~4 shards, so a job's working set is a few shards; 0: the library default, "
        "which shuffles this whole dataset as one block (every shard in use at once: any limit below the dataset "
        "re-downloads shards for most batches)",
    )
    p.add_argument(
        "--job-timeout", type=float, default=300.0, help="a job still running after this is a hang"
    )
    p.add_argument("--passes", nargs="+", default=["unlimited", "unlimited_private", "two_batches", "tight"])
    p.add_argument("--latency-ms", type=float, default=0.0, help="added before each request (30: remote)")
    p.add_argument(
        "--mb-per-s", type=float, default=0.0, help="cap per connection, 1e6 B/s (0: none; 50: remote)"
    )
    p.add_argument(
        "--repeats", type=int, default=1, help="rounds of the passes, alternating; medians reported"
    )
    # job mode (internal)
    p.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--remote", help=argparse.SUPPRESS)
    p.add_argument("--local", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--limit", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.job:
        run_job(args)
        return
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    moto, endpoint = start_moto()
    scratch = tempfile.mkdtemp(prefix="bench-cache-pressure-")
    rows = []
    try:
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="bench")
        os.environ["S3_ENDPOINT_URL"] = endpoint
        remote = "s3://bench/pressure"
        write_dataset(remote, args.samples, args.shard_bytes)
        index = json.loads(s3.get_object(Bucket="bench", Key="pressure/index.json")["Body"].read())
        shard = max(s["raw_data"]["bytes"] for s in index["shards"])
        per_batch = max(1, math.ceil(args.batch_size * SAMPLE_BYTES / shard))  # refined by the unlimited pass
        copy = os.path.join(scratch, "plans")  # the same shards, read locally for the jobs' plans
        write_dataset(copy, args.samples, args.shard_bytes)
        readers = reader_batches(
            copy,
            seeds=[1000 + j for j in range(args.jobs)],
            workers=args.workers,
            batch_size=args.batch_size,
            block=args.shuffle_block_size,
            epochs=args.epochs,
        )
        best: dict[str, int] = {}
        with ShapingProxy(endpoint, latency_s=args.latency_ms / 1e3, mb_per_s=args.mb_per_s) as proxy:
            for name in ["index.json", *(s["raw_data"]["basename"] for s in index["shards"])]:
                got = s3.get_object(Bucket="bench", Key=f"pressure/{name}")
                proxy.hold(
                    f"/bench/pressure/{name}",
                    got["Body"].read(),
                    got["ResponseMetadata"]["HTTPHeaders"].items(),
                )
            os.environ["S3_ENDPOINT_URL"] = proxy.url
            for round_ in range(args.repeats):
                for name in args.passes:
                    if name in ("unlimited", "unlimited_private"):
                        limit = None
                    elif name == "two_batches":
                        limit = max(4, 2 * per_batch * args.jobs) * shard
                    elif name == "tight":
                        limit = 4 * shard
                    else:
                        raise SystemExit(f"error: unknown pass {name!r}")
                    row = run_pass(name, args, remote, scratch, limit, proxy)
                    row["round"] = round_
                    if limit and name not in best:  # readers keep their chunk: predownload = 8 batches
                        best[name] = best_possible_downloads(readers, limit // shard, chunk=8)
                    if name == "unlimited":
                        per_batch = max(per_batch, row["max_shards_per_batch"])
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        moto.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    summary = summarize(rows, shard=shard, shards=len(index["shards"]))
    summary["best_possible_downloads"] = best
    if "two_batches" in best:
        summary["two_batches_floor_cost"] = floor_cost(
            summary["medians"], best=best["two_batches"], shards=len(index["shards"])
        )
    summary["latency_ms"], summary["mb_per_s"] = args.latency_ms, args.mb_per_s
    summary["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    summary["machine"] = machine()
    print(json.dumps(summary), flush=True)


def floor_cost(medians: dict[str, dict[str, float]], *, best: int, shards: int) -> float | None:
    """The two-batches cost that the downloads a limit forces would bring on their own: the unlimited pass
    plus ``best - shards`` more downloads (the fewest any eviction policy makes, less the one per shard the
    unlimited pass makes), each at what a download costs this machine with no limit at all, measured by the
    cache-per-job pass against the shared one (its extra GETs, its extra seconds; the proxy's CPU, on the
    same cores, included). None without both baselines or when the cache per job made no extra GETs."""
    unlimited, private = medians.get("unlimited"), medians.get("unlimited_private")
    if not unlimited or not private or private["gets"] <= unlimited["gets"]:
        return None
    # in seconds per sample (both passes read the same samples)
    shared, own = 1 / unlimited["samples_per_s"], 1 / private["samples_per_s"]
    per_download = max(own - shared, 0.0) / (private["gets"] - unlimited["gets"])
    return round(1 - shared / (shared + max(0, best - shards) * per_download), 3)


def summarize(rows: list[dict[str, Any]], *, shard: int, shards: int) -> dict[str, Any]:
    """The summary line: each pass's medians over its rounds (samples/s, GETs), the two-batches costs against
    both baselines, and the worst of every limited pass (disk over the limit, hangs, crashes, wrong samples)."""
    by: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(r["pass"] for r in rows):
        mine = [r for r in rows if r["pass"] == name]
        by[name] = {
            key: statistics.median(r[key] for r in mine)
            for key in ("samples_per_s", "iter_samples_per_s", "gets")
        }
    summary: dict[str, Any] = {
        "bench": "cache_pressure",
        "summary": True,
        "shard_bytes": shard,
        "shards": shards,
    }
    summary["rounds"] = max((r["round"] for r in rows), default=0) + 1
    summary["medians"] = by

    def cost(key: str, limited: str, baseline: str) -> float | None:
        if limited in by and baseline in by and by[baseline][key]:
            return round(1 - by[limited][key] / by[baseline][key], 3)
        return None

    for key, label in (("samples_per_s", ""), ("iter_samples_per_s", "_iter")):
        for baseline, suffix in (("unlimited", ""), ("unlimited_private", "_vs_private")):
            got = cost(key, "two_batches", baseline)
            if got is not None:
                summary[f"two_batches{label}_cost{suffix}"] = got
    limited = [r for r in rows if r["limit_bytes"]]
    summary["max_disk_over_limit"] = max((r["max_disk_over_limit"] for r in limited), default=None)
    for key in ("hangs", "crashes", "wrong", "missing", "duplicates"):
        summary[key] = sum(r[key] for r in rows)
    return summary


if __name__ == "__main__":
    main()
