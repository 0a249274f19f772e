"""Remote streaming benchmark against a loopback S3-compatible server (moto): three libraries under network
latency (the default), or ours remote vs local disk (``--local-vs-remote``).

Three libraries (default). A shaping proxy (``_shaping_proxy``: ``--latency-ms`` per request, ``--mb-per-s``
per connection) sits in front of the loopback server. The same dataset (``--samples`` rows of 2048 int32 tokens
and an id) is written once per shard size (``--shard-mib``) in each library's own format (MDS for ours and
mosaicml-streaming, ``litdata.optimize`` chunks for LitData) and uploaded. Each library then reads one shuffled
epoch, batch 32, from an empty cache with 1, 4 and 8 DataLoader workers (``--workers``), in a subprocess under
its own venv (drivers ``_peer_*.py``; peers: ``--streaming-python``, ``--litdata-python``). One JSON line per
(library, shard size, workers): the median over ``--repeats`` of time to first batch and of samples/s over the
epoch (startup included), and the bytes and GETs the proxy saw over the dataset's bytes. A summary line gives
our ratios to the better peer; ``--svg`` writes a plot. All libraries run in one process tree on one machine,
alternating, so ratios are fair on a noisy machine; absolute figures are not.

Remote vs local (``--local-vs-remote``). One JSON line per case: time to the first batch from a cold cache; steady-state samples/s and MB/s through a
2-worker ``StreamingDataLoader`` for the remote stream and for the same shards on local disk in the same run
(ratio); bytes downloaded per epoch over the dataset size (target 1.0 with an unlimited cache), and the number
of shard GETs seen by a counting proxy (a separate, untimed pass).

Usage: ``python scripts/bench/streaming_remote.py [--samples 20000] [--workers 1,4,8] [--shard-mib 8,64]
[--repeats 3] [--svg docs/assets/bench-runs/streaming-remote-latency.svg]``; ``--local-vs-remote [--compression zstd]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _common import machine

from streaming import MDSWriter, StreamingDataLoader, StreamingDataset

REPO = Path(__file__).resolve().parents[2]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    exe = Path(sys.executable).with_name("moto_server")
    port = _port()
    proc = subprocess.Popen(
        [str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto_server did not start")


def write(out: str, n: int, compression: str | None) -> None:
    pool = np.random.default_rng(0).integers(0, 50_000, size=(64, 2048), dtype=np.int32)
    with MDSWriter(
        out=out,
        columns={"tokens": "ndarray:int32:2048", "id": "int"},
        compression=compression,
        size_limit="16mb",
        exist_ok=True,
    ) as w:
        for i in range(n):
            w.write({"tokens": pool[i % 64], "id": i})


def epoch(ds: StreamingDataset) -> tuple[float, float, int]:
    loader = StreamingDataLoader(ds, batch_size=32, num_workers=2)
    start = time.perf_counter()
    it = iter(loader)
    first = next(it)
    t_first = time.perf_counter() - start
    count, t0 = len(first["id"]), time.perf_counter()
    for batch in it:
        count += len(batch["id"])
    return t_first, (count - len(first["id"])) / (time.perf_counter() - t0), count


def dir_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).iterdir() if f.name.startswith("shard."))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--samples", type=int, default=None, help="default 20000 (40000 with --local-vs-remote)"
    )
    parser.add_argument("--compression", default=None)
    parser.add_argument("--local-vs-remote", action="store_true")
    parser.add_argument("--workers", default="1,4,8")
    parser.add_argument("--shard-mib", default="8,64")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument("--mb-per-s", type=float, default=50.0)
    parser.add_argument("--libs", default="ours,streaming,litdata")
    parser.add_argument("--streaming-python", default="/tmp/ref/venv-streaming/bin/python")
    parser.add_argument("--litdata-python", default="/tmp/ref/venv-litdata/bin/python")
    parser.add_argument("--svg", default=None, help="write a plot of samples/s and first batch here")
    args = parser.parse_args()
    if args.local_vs_remote:
        local_vs_remote(args.samples or 40_000, args.compression)
    else:
        compare(args)


def local_vs_remote(samples: int, compression: str | None) -> None:
    sys.path.insert(0, str(REPO))
    from tests.streaming.storage.fault_proxy import FaultProxy

    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    proc, endpoint = start_moto()
    scratch = tempfile.mkdtemp(prefix="bench-remote-")
    try:
        import boto3

        os.environ["S3_ENDPOINT_URL"] = endpoint
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
        remote, local_copy = "s3://bench/ds", os.path.join(scratch, "local")
        t0 = time.perf_counter()
        write(remote, samples, compression)
        upload_s = time.perf_counter() - t0
        write(local_copy, samples, compression)
        kwargs: dict[str, Any] = dict(batch_size=32, shuffle=True, num_canonical_nodes=1)
        cache = os.path.join(scratch, "cache")
        first_remote, sps_remote, n = epoch(StreamingDataset(remote=remote, local=cache, **kwargs))
        downloaded = dir_bytes(cache)
        first_local, sps_local, _ = epoch(StreamingDataset(local=local_copy, **kwargs))
        dataset_bytes = sum(s.raw_data.bytes for s in StreamingDataset(local=local_copy, **kwargs).shards)
        stored_bytes = sum(
            f.bytes for s in StreamingDataset(local=local_copy, **kwargs).shards for f in s.stored_files()
        )
        gets: Counter = Counter()

        def count(n_: int, method: str, path: str) -> None:
            if method == "GET" and "shard." in path:
                gets[re.sub(r"\?.*", "", path)] += 1

        with FaultProxy(endpoint, count) as proxy:
            os.environ["S3_ENDPOINT_URL"] = proxy.url
            shutil.rmtree(cache)
            epoch(StreamingDataset(remote=remote, local=cache, **kwargs))
        mb = 2048 * 4 / 1e6
        print(
            json.dumps(
                {
                    "bench": "streaming_remote",
                    "samples": n,
                    "compression": compression,
                    "dataset_mb": round(dataset_bytes / 1e6, 1),
                    "upload_mb_per_s": round(stored_bytes / upload_s / 1e6, 1),
                    "first_batch_cold_s": round(first_remote, 3),
                    "first_batch_local_s": round(first_local, 3),
                    "remote_samples_per_s": round(sps_remote),
                    "remote_mb_per_s": round(sps_remote * mb, 1),
                    "local_samples_per_s": round(sps_local),
                    "local_mb_per_s": round(sps_local * mb, 1),
                    "remote_over_local": round(sps_remote / sps_local, 3),
                    "downloaded_over_dataset": round(downloaded / dataset_bytes, 4),
                    "shard_gets_per_shard": round(sum(gets.values()) / max(len(gets), 1), 3),
                    "machine": machine(),
                }
            ),
            flush=True,
        )
    finally:
        proc.kill()
        shutil.rmtree(scratch, ignore_errors=True)


# ----- three libraries under latency -----

HERE = Path(__file__).resolve().parent
DRIVERS = {"ours": "_peer_ours.py", "streaming": "_peer_streaming.py", "litdata": "_peer_litdata.py"}


def _run(python: str, lib: str, argv: list[str], env: dict[str, str], cwd: str) -> dict[str, Any]:
    """Run ``lib``'s driver; its last JSON line (an error names the library and its stderr tail)."""
    proc = subprocess.run(
        [python, str(HERE / DRIVERS[lib]), *argv],
        capture_output=True, text=True, env={**os.environ, **env}, cwd=cwd, timeout=1800,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{lib} driver {argv[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def compare(args: argparse.Namespace) -> None:
    from _read_remote import BUCKET, LoopbackS3
    from _shaping_proxy import ShapingProxy

    samples = args.samples or 20_000
    libs = args.libs.split(",")
    pythons = {"ours": sys.executable, "streaming": args.streaming_python, "litdata": args.litdata_python}
    for lib in libs:
        if lib not in DRIVERS:
            sys.exit(f"error: --libs: unknown library {lib!r}; choose from {sorted(DRIVERS)}")
        if not Path(pythons[lib]).exists():
            sys.exit(
                f"error: --{lib}-python: {pythons[lib]} not found; point it at that library's venv python"
            )
    workers = [int(x) for x in args.workers.split(",")]
    shard_mibs = [int(x) for x in args.shard_mib.split(",")]
    scratch = tempfile.mkdtemp(prefix="bench-latency-")
    rows: list[dict[str, Any]] = []
    try:
        with (
            LoopbackS3() as s3,
            ShapingProxy(s3.endpoint, latency_s=args.latency_ms / 1e3, mb_per_s=args.mb_per_s) as proxy,
        ):
            env = {**s3.env(), "S3_ENDPOINT_URL": proxy.url}
            remotes: dict[tuple[str, int], tuple[str, int]] = {}
            for mib in shard_mibs:
                for lib in libs:
                    out = os.path.join(scratch, f"{lib}-{mib}")
                    _run(
                        pythons[lib],
                        lib,
                        ["write", "--out", out, "--samples", str(samples), "--shard-mib", str(mib)],
                        env,
                        scratch,
                    )
                    size = sum(f.stat().st_size for f in Path(out).iterdir() if f.name != "index.json")
                    remotes[lib, mib] = (s3.upload(out, f"{lib}-{mib}"), size)
                    for name in sorted(os.listdir(out)):  # served at a range's own cost (_shaping_proxy)
                        got = s3.client.get_object(Bucket=BUCKET, Key=f"{lib}-{mib}/{name}")
                        headers = got["ResponseMetadata"]["HTTPHeaders"].items()
                        proxy.hold(f"/{BUCKET}/{lib}-{mib}/{name}", got["Body"].read(), headers)
                    shutil.rmtree(out)
            for mib in shard_mibs:
                for w in workers:
                    runs: dict[str, list[dict[str, Any]]] = {lib: [] for lib in libs}
                    errors: dict[str, list[str]] = {lib: [] for lib in libs}
                    for rep in range(args.repeats):
                        for lib in libs:  # alternating, so drift on a shared machine hits every library alike
                            cache = os.path.join(scratch, f"cache-{lib}-{mib}-{w}-{rep}")
                            remote, _ = remotes[lib, mib]
                            proxy.reset()
                            argv = ["read", "--remote", remote, "--cache", cache, "--workers", str(w),
                                    "--batch", "32", "--endpoint", proxy.url]  # fmt: skip
                            try:
                                got = _run(pythons[lib], lib, argv, env, scratch)
                            except (
                                RuntimeError,
                                subprocess.TimeoutExpired,
                            ) as err:  # a library's own failure
                                proxy.reset()
                                errors[lib].append(str(err).strip().splitlines()[-1][:300])
                                shutil.rmtree(cache, ignore_errors=True)
                                continue
                            seen = proxy.reset()
                            runs[lib].append(
                                {
                                    **got,
                                    "bytes": seen.body_bytes,
                                    "gets": seen.gets,
                                    "conns": seen.connections,
                                    "held": seen.held,
                                }
                            )
                            shutil.rmtree(cache, ignore_errors=True)
                    for lib in libs:
                        r, (_, size) = runs[lib], remotes[lib, mib]
                        if not r:
                            row = {"bench": "streaming_remote_latency", "library": lib, "shard_mib": mib,
                                   "workers": w, "failed": len(errors[lib]), "errors": errors[lib]}  # fmt: skip
                            print(json.dumps(row), flush=True)
                            continue
                        row = {
                            "bench": "streaming_remote_latency",
                            "library": lib,
                            "shard_mib": mib,
                            "workers": w,
                            "samples": r[0]["samples"],
                            "first_batch_s": round(_median([x["first_batch_s"] for x in r]), 3),
                            "samples_per_s": round(_median([x["samples"] / x["epoch_s"] for x in r])),
                            "fetched_over_dataset": round(_median([x["bytes"] / size for x in r]), 3),
                            "gets": round(_median([x["gets"] for x in r])),
                            "connections": round(_median([x["conns"] for x in r])),
                            "held_answers": round(_median([x["held"] for x in r])),
                            "dataset_mb": round(size / 1e6, 1),
                            "latency_ms": args.latency_ms,
                            "mb_per_s_per_connection": args.mb_per_s,
                            "repeats": args.repeats,
                            "failed": len(errors[lib]),
                            "errors": errors[lib][:1],
                        }
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(_summary(rows, args) | {"machine": machine()}), flush=True)
    if args.svg:
        write_svg(
            rows, args.svg, f"{args.latency_ms:g} ms per request, {args.mb_per_s:g} MB/s per connection"
        )


COLORS = {"ours": "#1f77b4", "streaming": "#ff7f0e", "litdata": "#2ca02c"}
LABELS = {"ours": "ours", "streaming": "mosaicml-streaming 0.13.0", "litdata": "LitData 0.2.76"}


def write_svg(rows: list[dict[str, Any]], path: str, subtitle: str) -> None:
    """Two grouped bar charts (samples/s; first batch in s), one group per (shard size, workers), one bar
    per library; a plain SVG file (no plotting library needed)."""
    libs = list(dict.fromkeys(r["library"] for r in rows))
    groups = list(dict.fromkeys((r["shard_mib"], r["workers"]) for r in rows))
    by = {(r["library"], r["shard_mib"], r["workers"]): r for r in rows}
    bar, gap, left, height = 14, 18, 60, 180
    width = left + len(groups) * (len(libs) * bar + gap) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{2 * height + 150}" '
           'font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="16" font-size="13">Streaming one shuffled epoch from S3 behind {subtitle}</text>']  # fmt: skip
    for panel, (key, title) in enumerate((("samples_per_s", "samples/s (epoch, startup included)"),
                                          ("first_batch_s", "time to first batch (s)"))):  # fmt: skip
        top = 40 + panel * (height + 50)
        peak = max(r[key] for r in rows) or 1
        out.append(f'<text x="{left}" y="{top - 6}">{title}; max {peak:g}</text>')
        out.append(
            f'<line x1="{left}" y1="{top + height}" x2="{width - 10}" y2="{top + height}" stroke="#000"/>'
        )
        for g, (mib, w) in enumerate(groups):
            x0 = left + g * (len(libs) * bar + gap)
            for i, lib in enumerate(libs):
                r = by.get((lib, mib, w))
                if r is None:
                    continue
                h = height * r[key] / peak
                out.append(f'<rect x="{x0 + i * bar}" y="{top + height - h:.1f}" width="{bar - 2}" height="{h:.1f}" '
                           f'fill="{COLORS.get(lib, "#888")}"><title>{LABELS.get(lib, lib)}: {r[key]:g}</title></rect>')  # fmt: skip
            out.append(f'<text x="{x0}" y="{top + height + 14}">{mib} MiB, {w}w</text>')
    for i, lib in enumerate(libs):
        y = 2 * height + 130 + 0 * i
        x = left + i * 190
        out.append(f'<rect x="{x}" y="{y - 10}" width="10" height="10" fill="{COLORS.get(lib, "#888")}"/>')
        out.append(f'<text x="{x + 14}" y="{y}">{LABELS.get(lib, lib)}</text>')
    out.append("</svg>")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    Path(path).write_text("\n".join(out) + "\n")


def _summary(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Ours against the better peer per case: throughput ratio, first-batch ratio, bytes fetched."""
    cases = []
    for r in rows:
        if r["library"] != "ours":
            continue
        peers = [
            p
            for p in rows
            if p["library"] != "ours" and (p["shard_mib"], p["workers"]) == (r["shard_mib"], r["workers"])
        ]
        if not peers:
            continue
        cases.append({
            "shard_mib": r["shard_mib"],
            "workers": r["workers"],
            "throughput_over_best_peer": round(r["samples_per_s"] / max(p["samples_per_s"] for p in peers), 2),
            "first_batch_over_fastest_peer": round(r["first_batch_s"] / min(p["first_batch_s"] for p in peers), 2),
            "fetched_over_dataset": r["fetched_over_dataset"],
        })  # fmt: skip
    return {"bench": "streaming_remote_latency", "summary": True, "cases": cases}


if __name__ == "__main__":
    main()
