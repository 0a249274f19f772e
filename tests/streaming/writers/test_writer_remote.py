"""Writers with remote output: concurrent uploads, index last, nothing published on failure."""

from __future__ import annotations

import os

import pytest

from streaming import LocalDataset, MDSWriter
from streaming.storage import download_file, list_files
from tests.streaming.storage.fault_proxy import FaultProxy

boto3 = pytest.importorskip("boto3")  # the s3 extra (a dev dependency); absent on bare GPU machines


def _fetch(remote: str, dest) -> str:
    for url in list_files(remote + "/"):
        download_file(url, str(dest / url[len(remote) + 1 :]))
    return str(dest)


def test_write_to_s3_and_read_back(s3_bucket, tmp_path):
    remote = f"{s3_bucket}/ds"
    with MDSWriter(out=remote, columns={"x": "int", "s": "str"}, size_limit=300, compression="zstd") as w:
        for i in range(100):
            w.write({"x": i, "s": f"sample {i}"})
    names = [u.rsplit("/", 1)[1] for u in list_files(remote + "/")]
    assert "index.json" in names and len(names) > 5
    ds = LocalDataset(_fetch(remote, tmp_path / "copy"))
    assert [s["x"] for s in ds] == list(range(100))


def test_local_and_remote_pair_keep_local(s3_bucket, tmp_path):
    local = tmp_path / "local"
    with MDSWriter(out=(str(local), f"{s3_bucket}/pair"), columns={"x": "int"}, keep_local=True) as w:
        for i in range(10):
            w.write({"x": i})
    assert (local / "index.json").exists() and (local / "shard.00000.mds").exists()
    local2 = tmp_path / "local2"
    with MDSWriter(out=(str(local2), f"{s3_bucket}/pair2"), columns={"x": "int"}) as w:
        w.write({"x": 1})
    assert not local2.exists(), "without keep_local the staging files are removed after upload"


def test_existing_remote_dataset_requires_flag(s3_bucket):
    remote = f"{s3_bucket}/ds"
    with MDSWriter(out=remote, columns={"x": "int"}) as w:
        w.write({"x": 1})
    with pytest.raises(FileExistsError, match="exist_ok=True"):
        MDSWriter(out=remote, columns={"x": "int"})
    with MDSWriter(out=remote, columns={"x": "int"}, append=True) as w:
        w.write({"x": 2})
    keys = sorted(u.rsplit("/", 1)[1] for u in list_files(remote + "/"))
    assert keys == ["index.json", "shard.00000.mds", "shard.00001.mds"]


def test_failed_upload_publishes_no_index(s3_bucket, s3_env, monkeypatch):
    def fault(n, method, path):
        return 500 if method == "PUT" and "shard.00002" in path else None

    with FaultProxy(s3_env, fault) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        with pytest.raises(Exception, match="shard.00002"):
            with MDSWriter(out=f"{s3_bucket}/bad", columns={"x": "bytes"}, size_limit=200, retry=1) as w:
                for _ in range(40):
                    w.write({"x": os.urandom(50)})
    keys = [
        o["Key"]
        for o in boto3.client("s3", endpoint_url=s3_env)
        .list_objects_v2(Bucket=s3_bucket[5:])
        .get("Contents", [])
    ]
    assert keys and "bad/index.json" not in keys
