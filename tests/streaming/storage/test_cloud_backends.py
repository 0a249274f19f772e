"""GCS and Azure through their official SDKs against local emulators: write, list, stream back, 404."""

from __future__ import annotations

import pytest

from streaming import MDSWriter, StreamingDataset
from streaming.storage import download_file, list_files


@pytest.fixture(params=["gcs", "azure"])
def bucket(request):
    module, fixture = {
        "gcs": ("google.cloud.storage", "gcs_bucket"),
        "azure": ("azure.storage.blob", "azure_container"),
    }[request.param]
    pytest.importorskip(module)
    return request.getfixturevalue(fixture)


def test_write_and_stream(bucket, tmp_path):
    remote = f"{bucket}/ds"
    with MDSWriter(out=remote, columns={"x": "int"}, size_limit=200, compression="zstd") as w:
        for i in range(50):
            w.write({"x": i})
    names = [u.rsplit("/", 1)[1] for u in list_files(remote + "/")]
    assert "index.json" in names and len(names) > 3
    ds = StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=5, shuffle=True)
    assert sorted(int(s["x"]) for s in ds) == list(range(50))
    with pytest.raises(FileNotFoundError, match="nope"):
        download_file(f"{bucket}/nope", str(tmp_path / "x"))


def test_download_past_max_bytes_is_refused(bucket, tmp_path):
    from streaming.storage import upload_file
    from streaming.util.sizes import SizeLimitExceeded

    src = tmp_path / "blob.bin"
    src.write_bytes(b"b" * 3000)
    upload_file(str(src), f"{bucket}/blob.bin")
    with pytest.raises(SizeLimitExceeded, match="more than 1000 bytes"):
        download_file(f"{bucket}/blob.bin", str(tmp_path / "out.bin"), max_bytes=1000)
    assert not list(tmp_path.glob("out.bin*"))
    download_file(f"{bucket}/blob.bin", str(tmp_path / "out.bin"), max_bytes=3000)
    assert (tmp_path / "out.bin").read_bytes() == b"b" * 3000
