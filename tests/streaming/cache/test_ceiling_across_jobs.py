"""cache_limit holds for the whole cache folder at every moment, across jobs: two job processes x two DataLoader
workers share one cache on a loopback S3 server while a sampler sums, every 10 ms, every file in the folder
(shard files and temp downloads; not index.json nor the lock folder) plus the files already unlinked that a job
process or one of its workers still holds open or mapped (``/proc/<pid>/fd`` and ``/proc/<pid>/map_files``).

The sampler can only miss a peak (it looks between events), never invent one: every byte it counts is on disk
at the moment it looks, so the assertion does not depend on timing."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from streaming import MDSWriter

pytestmark = [pytest.mark.slow, pytest.mark.dist]

SAMPLES = 20_000
SAMPLE_BYTES = 200
LIMIT = 400_000

_JOB = """
import sys
import numpy as np
from streaming import StreamingDataLoader, StreamingDataset
remote, local, limit, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ds = StreamingDataset(remote=remote, local=local, batch_size=16, shuffle=True, shuffle_seed=seed,
                      shuffle_block_size=256, cache_limit=limit)
seen = np.zeros(len(ds), dtype=np.int64)
for batch in StreamingDataLoader(ds, batch_size=16, num_workers=2):
    for i, pad in zip(batch["x"].tolist(), batch["pad"]):
        assert pad == bytes([i % 251]) * len(pad), i
        seen[i] += 1
assert (seen == 1).all(), "every sample exactly once"
print("ok", flush=True)
"""


def _write(remote: str) -> None:
    with MDSWriter(out=remote, columns={"x": "int", "pad": "bytes"}, size_limit=16_000) as w:
        for i in range(SAMPLES):
            w.write({"x": i, "pad": bytes([i % 251]) * SAMPLE_BYTES})


def _tree(pids: list[int]) -> list[int]:
    import psutil

    out = []
    for pid in pids:
        try:
            out += [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            pass
    return out


def disk_bytes(folder: str, pids: list[int]) -> tuple[int, dict[str, int]]:
    """Bytes the cache folder occupies on disk now (each inode once) and what they are, by path: every file
    in it but index.json and the lock folder, plus unlinked files under it that ``pids`` hold open or mapped."""
    seen: set[tuple[int, int]] = set()
    found: dict[str, int] = {}
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != ".locks"]
        for name in files:
            if name == "index.json":
                continue
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                found[os.path.join(root, name)] = st.st_size
    for pid in pids:
        for kind in ("fd", "map_files"):
            where = f"/proc/{pid}/{kind}"
            try:
                links = os.listdir(where)
            except OSError:
                continue
            for link in links:
                try:
                    target = os.readlink(f"{where}/{link}")
                    if not (target.startswith(folder + "/") and target.endswith(" (deleted)")):
                        continue
                    if "/.locks/" in target:
                        continue
                    st = os.stat(f"{where}/{link}")
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    found[target] = st.st_size
    return sum(found.values()), found


def test_two_jobs_of_two_workers_never_exceed_the_limit(s3_bucket, s3_env, tmp_path):
    pytest.importorskip("psutil")
    remote, local = f"{s3_bucket}/ds", os.path.realpath(tmp_path / "cache")
    _write(remote)
    os.makedirs(local)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _JOB, remote, local, str(LIMIT), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    peak: list = [0, {}]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            total, found = disk_bytes(local, _tree([p.pid for p in procs if p.poll() is None]))
            if total > peak[0]:
                peak[:] = [total, found]
            stop.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        stop.set()
        sampler.join()
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "ok", err[-3000:]
    detail = "\n".join(f"{n} {Path(p).name}" for p, n in sorted(peak[1].items()))
    assert 0 < peak[0] <= LIMIT, f"peak {peak[0]} bytes > cache_limit={LIMIT}:\n{detail}"
