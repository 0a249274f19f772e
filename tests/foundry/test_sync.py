"""`python -m foundry.sync`: copies between two loopback S3 servers, resumes, verifies digests."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from foundry.sync import CorruptFileError, expected_digests, main, sync
from streaming import MDSWriter
from tests.streaming.storage.two_stores import TwoStores, second_s3_server, two_stores  # noqa: F401

boto3 = pytest.importorskip("boto3")


def _checkpoint(root: Path) -> dict[str, bytes]:
    """A save folder with one checkpoint whose manifest records each file's size and sha256."""
    files = {"model.pt": os.urandom(3000), "state.pt": b"optimizer state" * 50}
    ckpt = root / "ep0-ba2"
    ckpt.mkdir(parents=True)
    for name, data in files.items():
        (ckpt / name).write_bytes(data)
    meta = {n: {"bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in files.items()}
    (ckpt / "manifest.json").write_text(json.dumps({"step": 2, "epoch": 0, "files": meta}))
    (root / "latest").write_text("ep0-ba2")
    return {f"ep0-ba2/{n}": d for n, d in files.items()}


def _client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="x")


def test_expected_digests_from_manifest_and_mds_index(tmp_path):
    files = _checkpoint(tmp_path)
    got = expected_digests("ep0-ba2/manifest.json", (tmp_path / "ep0-ba2/manifest.json").read_text())
    assert {n: (e.size, e.digest) for n, e in got.items()} == {
        n: (len(d), hashlib.sha256(d).hexdigest()) for n, d in files.items()
    }
    with MDSWriter(out=str(tmp_path / "ds"), columns={"x": "int"}, hashes=["md5", "sha256"]) as w:
        for i in range(10):
            w.write({"x": i})
    index = expected_digests("ds/index.json", (tmp_path / "ds/index.json").read_text())
    shard = tmp_path / "ds" / "shard.00000.mds"
    assert index["ds/shard.00000.mds"].digest == hashlib.sha256(shard.read_bytes()).hexdigest()
    assert expected_digests("ds/readme.txt", "not json") == {}


def test_local_sync_resumes_and_replaces_a_corrupt_copy(tmp_path):
    files = _checkpoint(tmp_path / "src")
    dst = tmp_path / "dst"
    first = sync(str(tmp_path / "src"), str(dst), progress=False)
    assert (first.copied, first.skipped) == (4, 0)
    assert all((dst / n).read_bytes() == d for n, d in files.items())
    (dst / "ep0-ba2/model.pt").unlink()  # an interrupted sync: part of the destination missing
    (dst / "ep0-ba2/state.pt").write_bytes(b"x" * len(files["ep0-ba2/state.pt"]))  # same size, wrong bytes
    again = sync(str(tmp_path / "src"), str(dst), progress=False)
    assert (again.copied, again.replaced, again.skipped) == (1, 1, 2)
    assert all((dst / n).read_bytes() == d for n, d in files.items())


def test_corrupt_source_stops_before_the_manifest(tmp_path):
    _checkpoint(tmp_path / "src")
    (tmp_path / "src/ep0-ba2/model.pt").write_bytes(b"bitrot")
    with pytest.raises(CorruptFileError, match=r"model\.pt.*source is corrupt"):
        sync(str(tmp_path / "src"), str(tmp_path / "dst"), progress=False)
    assert not (tmp_path / "dst/ep0-ba2/manifest.json").exists()  # never looks complete
    assert main([str(tmp_path / "src"), str(tmp_path / "dst2"), "--quiet"]) == 2  # one error: line


def test_sync_checkpoint_between_two_servers_resumes(two_stores: TwoStores, tmp_path):  # noqa: F811
    files = _checkpoint(tmp_path / "ckpt")
    src, dst = f"{two_stores.bucket_a}/run1", f"{two_stores.bucket_b}/moved/run1"
    sync(str(tmp_path / "ckpt"), src, progress=False)
    report = sync(src, dst, progress=False)
    assert (report.copied, report.skipped) == (4, 0)
    moved = sorted(k for k in two_stores.keys(two_stores.endpoint_b, two_stores.bucket_b))
    assert moved == sorted(f"moved/run1/{n}" for n in [*files, "ep0-ba2/manifest.json", "latest"])
    b = _client(two_stores.endpoint_b)
    b.delete_object(Bucket=two_stores.bucket_b[5:], Key="moved/run1/ep0-ba2/model.pt")
    again = sync(src, dst, progress=False)
    assert (again.copied, again.skipped) == (1, 3)
    body = b.get_object(Bucket=two_stores.bucket_b[5:], Key="moved/run1/ep0-ba2/model.pt")["Body"].read()
    assert body == files["ep0-ba2/model.pt"]
    # a corrupted object on the source store is detected
    a = _client(two_stores.endpoint_a)
    a.put_object(Bucket=two_stores.bucket_a[5:], Key="run1/ep0-ba2/state.pt", Body=b"tampered")
    with pytest.raises(CorruptFileError, match="state.pt"):
        sync(src, f"{two_stores.bucket_b}/other", progress=False)


@pytest.mark.slow
def test_cli_module_prints_a_summary(two_stores: TwoStores, tmp_path):  # noqa: F811
    _checkpoint(tmp_path / "ckpt")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "foundry.sync",
            str(tmp_path / "ckpt"),
            f"{two_stores.bucket_b}/cli",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    )
    assert json.loads(out.stdout.strip().splitlines()[-1])["copied"] == 4
    bad = subprocess.run(
        [sys.executable, "-m", "foundry.sync", str(tmp_path / "nothing"), str(tmp_path / "x")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "no such file or folder" in bad.stderr and "Traceback" not in bad.stderr


def test_a_sync_stopped_mid_way_resumes_and_never_publishes_a_manifest_early(tmp_path, monkeypatch):
    import foundry.sync as sync_module

    files = _checkpoint(tmp_path / "src")
    real_upload, uploads = sync_module.upload_file, []

    def failing_upload(path: str, url: str) -> None:
        if len(uploads) == 2:
            raise ConnectionError("the network went away")
        uploads.append(url)
        real_upload(path, url)

    monkeypatch.setattr(sync_module, "upload_file", failing_upload)
    with pytest.raises(ConnectionError):
        sync(str(tmp_path / "src"), str(tmp_path / "dst"), progress=False)
    assert not (
        tmp_path / "dst/ep0-ba2/manifest.json"
    ).exists()  # data first: the copy does not look complete
    monkeypatch.setattr(sync_module, "upload_file", real_upload)
    report = sync(str(tmp_path / "src"), str(tmp_path / "dst"), progress=False)
    assert (report.copied, report.skipped) == (2, 2)
    assert all((tmp_path / "dst" / n).read_bytes() == d for n, d in files.items())


def test_profile_naming_a_missing_aws_profile_is_a_clear_error(two_stores: TwoStores, monkeypatch, tmp_path):  # noqa: F811
    from streaming.storage.profiles import use_profiles

    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    use_profiles({**two_stores.profiles, "s3://elsewhere/": {"aws_profile": "nope"}})
    _checkpoint(tmp_path / "ckpt")
    with pytest.raises(PermissionError, match="AWS profile 'nope' is not in"):
        sync(str(tmp_path / "ckpt"), "s3://elsewhere/x", progress=False)
    assert main([str(tmp_path / "ckpt"), "s3://elsewhere/x", "--quiet"]) == 2


def test_a_dataset_shard_that_disagrees_with_its_index_hash_is_detected(tmp_path):
    with MDSWriter(out=str(tmp_path / "ds/train"), columns={"x": "int"}, hashes=["sha256"]) as w:
        for i in range(50):
            w.write({"x": i})
    assert sync(str(tmp_path / "ds"), str(tmp_path / "copy"), progress=False).copied == 2
    shard = tmp_path / "ds/train/shard.00000.mds"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # same size, one bit pattern changed
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=r"train/shard\.00000\.mds.*source is corrupt"):
        sync(str(tmp_path / "ds"), str(tmp_path / "copy2"), progress=False)
