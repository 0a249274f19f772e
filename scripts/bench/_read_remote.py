"""The remote case of ``streaming_read.py``: a loopback S3 server (driver) and the measurement (children).

Design note: the driver starts its own ``moto_server`` on 127.0.0.1 (the executable installed next to the
project's python by ``pip install -e '.[dev]'``), uploads the raw token dataset once, and passes the endpoint
to every child through ``S3_ENDPOINT_URL`` (read by both libraries) with dummy credentials. The measurement
runs unchanged against either library: both fetch shards through boto3. boto3 is imported and one request
made before any timer starts, so the figures compare shard traffic and the libraries' own work, not a fixed
import cost both would pay.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUCKET = "bench"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class S3Unavailable(RuntimeError):
    """The loopback server cannot run here (the message says what to install)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LoopbackS3:
    """``with LoopbackS3() as s3:`` a moto S3 server on 127.0.0.1 with bucket ``bench``; stopped on exit.

    Raises:
        S3Unavailable: ``moto_server`` or ``boto3`` is not installed in the project's environment.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""

    def env(self) -> dict[str, str]:
        """Environment for a child reading from this server."""
        return {**CREDENTIALS, "S3_ENDPOINT_URL": self.endpoint}

    def __enter__(self) -> LoopbackS3:
        exe = Path(sys.executable).with_name("moto_server")
        try:
            import boto3
        except ImportError:
            raise S3Unavailable("boto3 is not installed (pip install -e '.[dev]')") from None
        if not exe.exists():
            raise S3Unavailable(f"{exe} not found: moto[server] is not installed (pip install -e '.[dev]')")
        port = _free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [str(exe), "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(300):
            try:
                urllib.request.urlopen(self.endpoint, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            self.__exit__()
            raise S3Unavailable(f"moto_server did not answer on {self.endpoint} within 30 s")
        self.client = boto3.client("s3", endpoint_url=self.endpoint, **_boto_credentials())
        self.client.create_bucket(Bucket=BUCKET)
        return self

    def upload(self, folder: str, prefix: str) -> str:
        """Upload every file of ``folder`` under ``prefix``; returns the ``s3://`` URL of the copy."""
        for name in sorted(os.listdir(folder)):
            self.client.upload_file(os.path.join(folder, name), BUCKET, f"{prefix}/{name}")
        return f"s3://{BUCKET}/{prefix}"

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


# ----- child (either library) -----


def shard_download_s(remote: str, name: str, folder: str) -> float:
    """Seconds to download one shard to a file in ``folder`` with a warm boto3 client: what a cache must do
    at least before a shard's first sample (GET and write; no checks, no rename)."""
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT_URL"], **_boto_credentials())
    prefix = remote.removeprefix(f"s3://{BUCKET}/")
    client.get_object(Bucket=BUCKET, Key=f"{prefix}/index.json")["Body"].read()  # connect, warm up
    path = os.path.join(folder, name)
    start = time.perf_counter()
    body = client.get_object(Bucket=BUCKET, Key=f"{prefix}/{name}")["Body"]
    with open(path, "wb") as f:
        for chunk in body.iter_chunks(1 << 20):
            f.write(chunk)
    seconds = time.perf_counter() - start
    os.remove(path)
    return seconds


def measure_remote(
    remote: str,
    local_copy: str,
    seconds: float,
    dataset: Callable[..., Any],
    loader_rate: Callable[[Any, int, float], dict[str, float]],
) -> dict[str, float]:
    """First sample from a cold cache (from constructing the dataset, and from ``iter``: the part that can
    wait for shards; its CPU seconds, all threads), against one shard's download; then 2-worker loader rates:
    remote (every shard cached) vs local disk.

    ``dataset(**kwargs)`` builds the benchmark's ``StreamingDataset``; ``loader_rate(ds, workers, seconds)``
    measures a loader over it (both from ``streaming_read``, so every case shares their settings).
    """
    cache = tempfile.mkdtemp(prefix="bench-remote-cache-")
    try:
        download = shard_download_s(remote, "shard.00000.mds", cache)  # imports boto3 before any timer
        start = time.perf_counter()
        ds = dataset(remote=remote, local=cache, shuffle=True)
        cpu, start_iter = time.process_time(), time.perf_counter()
        it = iter(ds)
        next(it)
        end = time.perf_counter()
        cpu = time.process_time() - cpu
        del it
        fill = time.perf_counter()
        for shard in range(len(ds.shards)):
            ds.prepare_shard(shard)
        fill_s = time.perf_counter() - fill
        local = loader_rate(dataset(local=local_copy, shuffle=True), 2, seconds)
        cached = loader_rate(dataset(remote=remote, local=cache, shuffle=True), 2, seconds)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {
        "first_sample_s": end - start,
        "iter_first_sample_s": end - start_iter,
        "iter_first_cpu_s": cpu,
        "shard_download_s": download,
        "first_over_download": (end - start) / download,
        "iter_first_over_download": (end - start_iter) / download,
        "fill_cache_s": fill_s,
        "samples_per_s": cached["samples_per_s"],
        "first_batch_s": cached["first_batch_s"],
        "local_samples_per_s": local["samples_per_s"],
        "remote_over_local": cached["samples_per_s"] / local["samples_per_s"],
    }
