"""`--storage-profiles`: the converters and `python -m streaming` pick each URL's store by prefix.

Two loopback S3 servers (moto) with a bucket each and their own credential variables, no `S3_ENDPOINT_URL`:
the converter reads text from store A and writes MDS to store B, and one CLI process lists and reads both;
the profiles come from a file given on the command line (the environment variable is unset), the same kind
of file `train.py storage=...` takes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from streaming.storage import upload_file
from streaming.storage.profiles import ENV_VAR, profile_for
from streaming.tools.cli import main as cli
from streaming.tools.storage_option import apply_storage_option, profiles_from_file
from tests.streaming.storage.two_stores import TwoStores, second_s3_server, two_stores  # noqa: F401

REPO = Path(__file__).resolve().parents[3]
CONVERTER = REPO / "scripts" / "data_prep" / "convert_dataset_hf.py"


def _converter():
    spec = importlib.util.spec_from_file_location("convert_dataset_hf", CONVERTER)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_profiles_from_a_profiles_file_or_a_foundry_storage_config(tmp_path):
    profiles = {"s3://a/": {"endpoint_url": "http://a", "addressing_style": "path"}}
    (tmp_path / "p.json").write_text(json.dumps(profiles))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(profiles))
    assert profiles_from_file(str(tmp_path / "p.json")) == profiles
    assert profiles_from_file(str(tmp_path / "p.yaml")) == profiles
    two_clouds = profiles_from_file(str(REPO / "conf" / "storage" / "two-clouds.yaml"))
    assert set(two_clouds) == {"s3://r2-bucket/", "s3://aws-bucket/"}
    assert profiles_from_file(str(REPO / "conf" / "storage" / "default.yaml")) == {}
    (tmp_path / "named.yaml").write_text(yaml.safe_dump({"profiles_file": str(tmp_path / "p.json")}))
    assert profiles_from_file(str(tmp_path / "named.yaml")) == profiles


def test_bad_profiles_files_name_the_file_and_the_fix(tmp_path):
    with pytest.raises(ValueError, match="missing.yaml.*no such file"):
        profiles_from_file(str(tmp_path / "missing.yaml"))
    (tmp_path / "secret.yaml").write_text(yaml.safe_dump({"s3://a/": {"secret_access_key": "x"}}))
    with pytest.raises(ValueError, match="secret.yaml.*looks like a secret"):
        profiles_from_file(str(tmp_path / "secret.yaml"))
    (tmp_path / "list.yaml").write_text("[1, 2]")
    with pytest.raises(ValueError, match="list.yaml.*mapping of URL prefix"):
        profiles_from_file(str(tmp_path / "list.yaml"))
    assert cli(["--storage-profiles", str(tmp_path / "missing.yaml"), "ls", str(tmp_path)]) == 1


def test_apply_installs_the_profiles_for_this_process(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"s3://a/": {"endpoint_url": "http://a"}}))
    apply_storage_option(None)
    assert ENV_VAR not in os.environ
    apply_storage_option(str(tmp_path / "p.yaml"))
    assert profile_for("s3://a/x").endpoint_url == "http://a"
    assert profile_for("s3://b/x").prefix == ""


@pytest.fixture
def profiles_file(two_stores: TwoStores, tmp_path, monkeypatch) -> Path:  # noqa: F811
    """The two stores' profiles in a YAML file; the environment variable is unset."""
    path = tmp_path / "stores.yaml"
    path.write_text(yaml.safe_dump({"profiles": two_stores.profiles}))  # a foundry storage config
    monkeypatch.delenv(ENV_VAR)
    return path


def _corpus_on_a(stores: TwoStores, tmp_path: Path) -> str:
    for i in range(3):
        doc = tmp_path / f"doc{i}.txt"
        doc.write_text(f"document {i}: " + "the quick brown fox jumps over the lazy dog. " * 40)
        upload_file(str(doc), f"{stores.bucket_a}/corpus/train/doc{i}.txt")
    return f"{stores.bucket_a}/corpus"


@pytest.mark.slow
def test_converter_reads_store_a_writes_store_b_and_the_cli_reads_both(
    two_stores,  # noqa: F811
    profiles_file,
    neox_tokenizer_path,
    tmp_path,
    capsys,
):
    from streaming.storage.profiles import use_profiles

    use_profiles(two_stores.profiles)  # only to upload the corpus; the converter gets the file
    corpus = _corpus_on_a(two_stores, tmp_path)
    os.environ.pop(ENV_VAR)
    out = f"{two_stores.bucket_b}/mds"
    report = _converter().main(
        ["--dataset", corpus, "--splits", "train", "--out", out, "--tokenizer", str(neox_tokenizer_path),
         "--concat_tokens", "32", "--eos_text", "<|endoftext|>", "--no_progress",
         "--storage_profiles", str(profiles_file)]
    )  # fmt: skip
    assert report["train"]["rows"] > 10
    keys_b = two_stores.keys(two_stores.endpoint_b, two_stores.bucket_b)
    assert "mds/train/index.json" in keys_b and any(k.endswith(".mds") for k in keys_b)
    assert not any(k.startswith("mds/") for k in two_stores.keys(two_stores.endpoint_a, two_stores.bucket_a))
    capsys.readouterr()
    os.environ.pop(ENV_VAR)  # the CLI too gets the profiles only from its option
    args = ["--storage-profiles", str(profiles_file)]
    assert cli([*args, "ls", corpus, f"{out}/train"]) == 0
    listed = capsys.readouterr().out.split()
    assert f"{corpus}/train/doc0.txt" in listed and f"{out}/train/index.json" in listed
    assert cli([*args, "validate", out, "--split", "train"]) == 0
    assert f"{report['train']['rows']} samples verified" in capsys.readouterr().out


def test_cli_lists_both_stores_in_one_call(two_stores, profiles_file, tmp_path, capsys):  # noqa: F811
    from streaming.storage.profiles import use_profiles

    use_profiles(two_stores.profiles)
    (tmp_path / "x.txt").write_text("x")
    upload_file(str(tmp_path / "x.txt"), f"{two_stores.bucket_a}/d/a.txt")
    upload_file(str(tmp_path / "x.txt"), f"{two_stores.bucket_b}/d/b.txt")
    os.environ.pop(ENV_VAR)
    assert cli(["--storage-profiles", str(profiles_file), "ls", f"{two_stores.bucket_a}/d",
                f"{two_stores.bucket_b}/d"]) == 0  # fmt: skip
    assert capsys.readouterr().out.split() == [
        f"{two_stores.bucket_a}/d/a.txt",
        f"{two_stores.bucket_b}/d/b.txt",
    ]


@pytest.mark.slow
def test_cli_process_lists_both_stores_from_the_profiles_file(two_stores, profiles_file, tmp_path):  # noqa: F811
    from streaming.storage.profiles import use_profiles

    use_profiles(two_stores.profiles)
    corpus = _corpus_on_a(two_stores, tmp_path)
    upload_file(str(tmp_path / "doc0.txt"), f"{two_stores.bucket_b}/other/doc.txt")
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    proc = subprocess.run(
        [sys.executable, "-m", "streaming", "--storage-profiles", str(profiles_file), "ls", corpus,
         f"{two_stores.bucket_b}/other"],
        env=env, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        *(f"{corpus}/train/doc{i}.txt" for i in range(3)),
        f"{two_stores.bucket_b}/other/doc.txt",
    ]
    without = subprocess.run(  # no profiles: the default endpoint (server A) has no bucket B
        [sys.executable, "-m", "streaming", "ls", f"{two_stores.bucket_b}/other"],
        env={**env, "S3_ENDPOINT_URL": two_stores.endpoint_a, "AWS_ACCESS_KEY_ID": "a-key",
             "AWS_SECRET_ACCESS_KEY": "a-secret"},
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert without.returncode != 0 and f"{two_stores.bucket_b}/other/doc.txt" not in without.stdout
