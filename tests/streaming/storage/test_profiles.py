"""Per-prefix store profiles: the pure resolution rule, validation, and two loopback S3 servers in one process."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.storage import download_file, list_files, open_url, upload_file
from streaming.storage.profiles import (
    ENV_VAR,
    StorageProfile,
    parse_profiles,
    profile_for,
    resolve,
    use_profiles,
)
from tests.streaming.storage.two_stores import TwoStores, second_s3_server, two_stores  # noqa: F401


def test_longest_prefix_wins_and_default_keeps_s3_endpoint_url():
    profiles = parse_profiles(
        {"s3://data/": {"endpoint_url": "http://a"}, "s3://data/eu/": {"endpoint_url": "http://b"}}
    )
    env = {"S3_ENDPOINT_URL": "http://default", "S3_UNSIGNED": "1"}
    assert resolve("s3://data/eu/x.mds", profiles, env).endpoint_url == "http://b"
    assert resolve("s3://data/us/x.mds", profiles, env).endpoint_url == "http://a"
    default = resolve("s3://other/x", profiles, env)
    assert (default.prefix, default.endpoint_url, default.unsigned) == ("", "http://default", True)
    assert resolve("s3://other/x", (), {}).endpoint_url is None


@given(
    st.lists(st.text("ab/", min_size=0, max_size=4), min_size=1, max_size=6, unique=True),
    st.text("ab/", max_size=6),
)
def test_resolution_is_the_longest_matching_prefix(tails, path):
    profiles = tuple(StorageProfile(prefix=f"s3://b/{t}", endpoint_url=t) for t in tails)
    got = resolve(f"s3://b/{path}", profiles, {})
    matching = [t for t in tails if path.startswith(t)]
    if matching:
        assert got.endpoint_url == max(matching, key=len)
    else:
        assert got.prefix == ""


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"secret_access_key": "x"}, "looks like a secret"),
        ({"endpoint": "http://x"}, "unknown setting 'endpoint'"),
        ({"addressing_style": "dns"}, "addressing_style must be one of"),
        ({"access_key_id_env": "K"}, "set both access_key_id_env and secret_access_key_env"),
    ],
)
def test_bad_profiles_name_the_prefix_and_the_fix(settings, message):
    with pytest.raises(ValueError, match=message) as err:
        parse_profiles({"s3://bucket/": settings})
    assert "s3://bucket/" in str(err.value)


def test_a_prefix_must_be_an_s3_url():
    with pytest.raises(ValueError, match="must be an s3:// URL prefix"):
        parse_profiles({"gs://bucket/": {}})


def test_unset_credential_variable_is_named(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    profile = StorageProfile(prefix="s3://b/", access_key_id_env="NO_SUCH_KEY_VAR", secret_access_key_env="S")
    with pytest.raises(PermissionError, match="NO_SUCH_KEY_VAR is not set"):
        profile.credentials()


def test_use_profiles_round_trips_through_the_environment_and_a_yaml_file(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, "")
    use_profiles({"s3://r2/": {"endpoint_url": "https://r2.example", "region": "auto"}})
    assert json.loads(os.environ[ENV_VAR]) == {
        "s3://r2/": {"endpoint_url": "https://r2.example", "region": "auto"}
    }
    assert profile_for("s3://r2/x").region == "auto"
    path = tmp_path / "profiles.yaml"
    path.write_text("s3://aws/:\n  aws_profile: prod\n  addressing_style: virtual\n")
    monkeypatch.setenv(ENV_VAR, str(path))
    assert profile_for("s3://aws/k").aws_profile == "prod"
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing.yaml"))
    with pytest.raises(ValueError, match="neither a JSON object nor an existing"):
        profile_for("s3://aws/k")
    use_profiles(None)
    assert profile_for("s3://r2/x").prefix == ""


def test_two_stores_in_one_process(two_stores: TwoStores, tmp_path):  # noqa: F811
    src = tmp_path / "f.bin"
    src.write_bytes(b"shard bytes")
    upload_file(str(src), f"{two_stores.bucket_a}/data/f.bin")
    upload_file(str(src), f"{two_stores.bucket_b}/ckpt/f.bin")
    bucket_a, bucket_b = two_stores.bucket_a, two_stores.bucket_b
    # each object is on its own server only: the profile, not S3_ENDPOINT_URL, chose the endpoint
    assert two_stores.keys(two_stores.endpoint_a, bucket_a) == ["data/f.bin"]
    assert two_stores.keys(two_stores.endpoint_b, bucket_b) == ["ckpt/f.bin"]
    assert list_files(f"{bucket_b}/ckpt/") == [f"{bucket_b}/ckpt/f.bin"]
    download_file(f"{bucket_a}/data/f.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == b"shard bytes"
    with open_url(f"{bucket_b}/ckpt/note.txt", "w") as f:  # smart_open gets the profile's client too
        f.write("hello")
    with open_url(f"{bucket_b}/ckpt/note.txt") as f:
        assert f.read() == b"hello"
    assert "ckpt/note.txt" in two_stores.keys(two_stores.endpoint_b, bucket_b)


def test_profile_with_unset_credentials_fails_naming_the_variable(
    two_stores: TwoStores,  # noqa: F811
    monkeypatch,
    tmp_path,
):
    monkeypatch.delenv("STORE_B_SECRET")
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(PermissionError, match="STORE_B_SECRET is not set"):
        upload_file(str(tmp_path / "f"), f"{two_stores.bucket_b}/f")
