"""Two loopback S3 servers (moto) with per-prefix profiles, for tests of several stores in one run.

Import the fixtures into a test module: ``from tests.streaming.storage.two_stores import two_stores  # noqa``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streaming.storage.profiles import ENV_VAR
from tests.conftest import _free_port, _start_server, _stop_server


@dataclass(frozen=True)
class TwoStores:
    endpoint_a: str
    endpoint_b: str
    bucket_a: str  # s3://... on server A only
    bucket_b: str  # s3://... on server B only
    profiles: dict[str, dict[str, str]]

    def keys(self, endpoint: str, bucket: str) -> list[str]:
        import boto3

        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="x")
        return [o["Key"] for o in client.list_objects_v2(Bucket=bucket[5:]).get("Contents", [])]


@pytest.fixture(scope="session")
def second_s3_server() -> Iterator[str]:
    import sys

    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists():
        pytest.skip("moto[server] is not installed (pip install -e '.[dev]')")
    url = f"http://127.0.0.1:{_free_port()}"
    proc = _start_server([str(exe), "-H", "127.0.0.1", "-p", url.rsplit(":", 1)[1]], url, name="moto_server")
    yield url
    _stop_server(proc)


@pytest.fixture
def two_stores(s3_server: str, second_s3_server: str, monkeypatch: pytest.MonkeyPatch) -> TwoStores:
    """A bucket on each server, reached through profiles with their own credential variables; no
    ``S3_ENDPOINT_URL`` and no AWS_* credentials in the environment."""
    import boto3

    pytest.importorskip("boto3")
    for var in (
        "S3_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_PROFILE",
        "S3_UNSIGNED",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("STORE_A_KEY", "a-key")
    monkeypatch.setenv("STORE_A_SECRET", "a-secret")
    monkeypatch.setenv("STORE_B_KEY", "b-key")
    monkeypatch.setenv("STORE_B_SECRET", "b-secret")
    names = [f"store-{side}-{uuid.uuid4().hex[:10]}" for side in "ab"]
    for endpoint, name in zip((s3_server, second_s3_server), names, strict=True):
        boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="x"
        ).create_bucket(Bucket=name)
    profiles = {
        f"s3://{names[0]}/": {
            "endpoint_url": s3_server,
            "access_key_id_env": "STORE_A_KEY",
            "secret_access_key_env": "STORE_A_SECRET",
            "addressing_style": "path",
        },
        f"s3://{names[1]}/": {
            "endpoint_url": second_s3_server,
            "access_key_id_env": "STORE_B_KEY",
            "secret_access_key_env": "STORE_B_SECRET",
            "region": "eu-west-1",
        },
    }
    monkeypatch.setenv(ENV_VAR, "")  # use_profiles below overwrites it; teardown restores the original
    from streaming.storage.profiles import use_profiles

    use_profiles(profiles)
    return TwoStores(s3_server, second_s3_server, f"s3://{names[0]}", f"s3://{names[1]}", profiles)
