"""Azure Blob Storage through the official SDK against Azurite: one URL form for writing and reading."""

from __future__ import annotations

import pytest

from streaming import MDSWriter, StreamingDataset
from streaming.storage import download_file, list_files

pytest.importorskip("azure.storage.blob")


def test_write_and_stream_azure(azure_container, tmp_path):
    remote = f"{azure_container}/ds"
    with MDSWriter(out=remote, columns={"x": "int"}, size_limit=200, compression="zstd") as w:
        for i in range(50):
            w.write({"x": i})
    names = [u.rsplit("/", 1)[1] for u in list_files(remote + "/")]
    assert "index.json" in names and len(names) > 3
    ds = StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=5, shuffle=True)
    assert sorted(int(s["x"]) for s in ds) == list(range(50))
    with pytest.raises(FileNotFoundError, match="nope"):
        download_file(f"{azure_container}/nope", str(tmp_path / "x"))
