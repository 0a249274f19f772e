"""Shared fixtures: paths to the read-only test data in ../shared/data (never copied into the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared test-data root; tests that need it skip with a clear reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared test data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def neox_tokenizer_path(shared_data: Path) -> Path:
    """The gpt-neox-20b tokenizer.json that MPT uses."""
    return shared_data / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"


@pytest.fixture(scope="session", autouse=True)
def _private_process_registry(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Processes the tests start claim their runs (`stackbase.process`) in a registry of the session's own,
    not in the user's `$XDG_RUNTIME_DIR`; children inherit it through the environment."""
    import os

    folder = tmp_path_factory.mktemp("procs")
    folder.chmod(0o700)
    os.environ["FOUNDRY_PROC_DIR"] = str(folder)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(cmd: list[str], probe: str, *, name: str):
    """Start a loopback test server and wait (30 s at most) until ``probe`` answers over HTTP."""
    import subprocess
    import time
    import urllib.error
    import urllib.request

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(probe, timeout=1).close()
            return proc
        except urllib.error.HTTPError:
            return proc  # an HTTP error status still means the server answers
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"{name} did not start") from None
            time.sleep(0.1)


def _stop_server(proc) -> None:
    proc.kill()  # node (azurite) ignores SIGTERM for seconds (ecosystem.md); nothing here needs a clean stop
    proc.wait()


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-compatible HTTP server (moto) on 127.0.0.1, for the whole test session; yields its URL."""
    import sys

    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists():
        pytest.skip("moto[server] is not installed (pip install -e '.[dev]')")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start_server([str(exe), "-H", "127.0.0.1", "-p", str(port)], url, name="moto_server")
    yield url
    _stop_server(proc)


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """Point every S3 client at the loopback server with dummy credentials."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_server)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return s3_server


@pytest.fixture
def s3_bucket(s3_env, request):
    """A fresh bucket on the loopback S3 server; yields ``s3://<bucket>``."""
    import re
    import uuid

    import boto3

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + "-" + uuid.uuid4().hex[:8]
    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket=name)
    return f"s3://{name}"


@pytest.fixture(scope="session")
def gcs_server():
    """A GCS emulator (gcp-storage-emulator) on 127.0.0.1; yields its URL."""
    import sys

    exe = Path(sys.executable).with_name("gcp-storage-emulator")
    if not exe.exists():
        pytest.skip("gcp-storage-emulator is not installed (pip install -e '.[dev]')")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [str(exe), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "-q"]
    proc = _start_server(cmd, url + "/storage/v1/b?project=test", name="gcp-storage-emulator")
    yield url
    _stop_server(proc)


@pytest.fixture
def gcs_bucket(gcs_server, monkeypatch):
    """A fresh bucket on the GCS emulator; yields ``gs://<bucket>``."""
    import uuid

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    name = f"bucket-{uuid.uuid4().hex[:10]}"
    storage.Client(project="test", credentials=AnonymousCredentials()).create_bucket(name)
    return f"gs://{name}"


AZURITE = REPO / ".cache" / "node" / "node_modules" / ".bin" / "azurite-blob"
# The Azure Storage emulator's fixed development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory):
    """Azurite (the Azure Blob emulator) on 127.0.0.1; yields its connection string."""
    if not AZURITE.exists():
        pytest.skip("azurite is not installed (make install-emulators)")
    port = _free_port()
    cmd = [
        str(AZURITE),
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--location",
        str(tmp_path_factory.mktemp("azurite")),
        "--silent",
        "--skipApiVersionCheck",
        "--loose",
    ]
    proc = _start_server(cmd, f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}?comp=list", name="azurite")
    yield (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};"
    )
    _stop_server(proc)


@pytest.fixture
def azure_container(azure_server, monkeypatch):
    """A fresh container on Azurite; yields ``azure://<container>``."""
    import uuid

    from azure.storage.blob import BlobServiceClient

    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure_server)
    name = f"c{uuid.uuid4().hex[:12]}"
    BlobServiceClient.from_connection_string(azure_server).create_container(name)
    return f"azure://{name}"


@pytest.fixture
def fake_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU needed: torch believes a CUDA accelerator exists, so DataLoader starts its real pin-memory
    thread, and `Tensor.pin_memory` returns a copy tagged `_test_pinned = True`."""
    import torch

    def pin_memory(self, *args, **kwargs):
        out = self.clone()
        out._test_pinned = True
        return out

    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("cuda"))
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    monkeypatch.setattr(torch.accelerator, "set_device_index", lambda index: None)
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
