"""`storage.profiles`: composes and validates as part of the train config; a `train.py` run reads its data from
one S3 server and checkpoints to another, by profiles alone (no S3_ENDPOINT_URL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf.errors import OmegaConfBaseException

from foundry.checkpoint import CheckpointStore, find_latest
from foundry.config import register_configs, to_train_config
from foundry.errors import ConfigError
from foundry.storage_config import StorageConfig, StorageProfileConfig, apply_storage
from foundry.sync import sync
from streaming.storage.profiles import ENV_VAR, profile_for
from tests.foundry.data.test_token_id_data import SMALL_RUN, write_token_mds
from tests.streaming.storage.two_stores import TwoStores, second_s3_server, two_stores  # noqa: F401

CONF = Path(__file__).resolve().parents[2] / "conf"
REPO = CONF.parent


def _cfg(*overrides: str):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return to_train_config(compose("train", overrides=list(overrides)))


def test_default_has_no_profiles_and_two_clouds_composes():
    assert _cfg().storage == StorageConfig()
    profiles = _cfg("storage=two-clouds").storage.profiles
    assert profiles["s3://r2-bucket/"].access_key_id_env == "R2_ACCESS_KEY_ID"
    assert profiles["s3://aws-bucket/"].aws_profile == "prod"


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        ({"s3://b/": {"secret_access_key": "abc"}}, "secret_access_key"),
        ({"s3://b/": {"endpoint": "http://x"}}, "endpoint"),
        ({"s3://b/": {"addressing_style": "dns"}}, "addressing_style must be one of"),
        ({"gs://b/": {"region": "x"}}, "must be an s3:// URL prefix"),
    ],
)
def test_bad_profiles_fail_at_compose_naming_the_key(settings, needle, tmp_path):
    """A conf/storage/*.yaml with these profiles (prefixes cannot be written as CLI keys)."""
    (tmp_path / "storage").mkdir()
    (tmp_path / "storage" / "bad.yaml").write_text(
        json.dumps({"defaults": ["_storage"], "profiles": settings})
    )
    with pytest.raises((ConfigError, ConfigCompositionException, OmegaConfBaseException), match=needle):
        _cfg(f"hydra.searchpath=[file://{tmp_path}]", "storage=bad")


def test_apply_storage_installs_the_profiles_for_streaming(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, "")
    apply_storage(
        StorageConfig(profiles={"s3://r2/": StorageProfileConfig(endpoint_url="https://r2.example")})
    )
    assert profile_for("s3://r2/data/x").endpoint_url == "https://r2.example"
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps({"s3://aws/": {"region": "eu-west-1"}}))
    apply_storage(StorageConfig(profiles_file=str(path)))
    assert profile_for("s3://aws/x").region == "eu-west-1"
    with pytest.raises(ValueError, match="not both"):
        StorageConfig(profiles={"s3://a/": StorageProfileConfig()}, profiles_file=str(path))


@pytest.mark.slow
def test_train_reads_data_from_store_a_and_checkpoints_to_store_b(two_stores: TwoStores, tmp_path):  # noqa: F811
    sync(str(write_token_mds(tmp_path / "mds", vocab=1000)), f"{two_stores.bucket_a}/mds", progress=False)
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(json.dumps(two_stores.profiles))
    save = f"{two_stores.bucket_b}/run1/ckpts"
    args = [
        *SMALL_RUN,
        "data=local-mds",
        f"data.local={tmp_path / 'cache'}",
        f"data.remote={two_stores.bucket_a}/mds",
        "model.vocab_size=1024",
        "checkpoint=local",
        f"checkpoint.save_folder={save}",
        "checkpoint.save_interval=1ba",
        f"storage.profiles_file={profiles}",
        "run_name=two-stores",
    ]
    env = {**os.environ, "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "1"}
    env.pop(ENV_VAR, None)  # only the config names the stores
    assert "S3_ENDPOINT_URL" not in env
    proc = _train(args, tmp_path, env)
    assert any(
        k.startswith("mds/train/") for k in two_stores.keys(two_stores.endpoint_a, two_stores.bucket_a)
    )
    assert (tmp_path / "cache" / "train" / "index.json").exists()  # shards came from server A
    latest = find_latest(CheckpointStore(save), scratch=str(tmp_path / "scratch"))
    assert latest is not None and latest.manifest.step == 2
    assert not [k for k in two_stores.keys(two_stores.endpoint_a, two_stores.bucket_a) if "ckpts" in k]
    # moving the run: the checkpoints go back to store A by foundry.sync, verified against the manifests
    report = sync(save, f"{two_stores.bucket_a}/run1/ckpts", progress=False)
    assert report.copied == len(two_stores.keys(two_stores.endpoint_b, two_stores.bucket_b)) > 0
    # ... and the run continues there by changing the URL only
    moved = [a.replace(save, f"{two_stores.bucket_a}/run1/ckpts") for a in args]
    proc = _train([*moved, "trainer.max_duration=3ba"], tmp_path, env)
    assert f"autoresume: loaded {two_stores.bucket_a}/run1/ckpts/ep0-ba2" in proc.stdout
    latest = find_latest(CheckpointStore(f"{two_stores.bucket_a}/run1/ckpts"), scratch=str(tmp_path / "s2"))
    assert latest is not None and latest.manifest.step == 3


def _train(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(REPO / "train.py"), *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc
