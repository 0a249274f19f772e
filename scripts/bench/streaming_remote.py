"""Remote streaming benchmark against a loopback S3-compatible server (moto), side by side with local disk.

One JSON line per case: time to the first batch from a cold cache; steady-state samples/s and MB/s through a
2-worker ``StreamingDataLoader`` for the remote stream and for the same shards on local disk in the same run
(ratio); bytes downloaded per epoch over the dataset size (target 1.0 with an unlimited cache), and the number
of shard GETs seen by a counting proxy (a separate, untimed pass).

Usage: ``python scripts/bench/streaming_remote.py [--samples 40000] [--compression zstd]``.
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
    parser.add_argument("--samples", type=int, default=40_000)
    parser.add_argument("--compression", default=None)
    args = parser.parse_args()
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
        write(remote, args.samples, args.compression)
        upload_s = time.perf_counter() - t0
        write(local_copy, args.samples, args.compression)
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
                    "compression": args.compression,
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


if __name__ == "__main__":
    main()
