"""`stackbase.secrets`, masking by the source of a value (issue 39): credential environment variables by name,
never ordinary ones such as PWD; their URL-encoded forms too; the user's own list."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from stackbase.secrets import (
    MASK,
    SECRET_ENV_VAR,
    is_secret_env,
    redact_text,
    redact_value,
    secret_env_values,
)

SECRET = "s3cr3t/v@lue+with&chars"


@pytest.mark.parametrize(
    "name",
    ["AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "HF_TOKEN", "WANDB_API_KEY", "DB_PASS", "MYSQL_PWD",
     "SLACK_WEBHOOK_URL", "PGPASSWORD", "AZURE_STORAGE_CONNECTION_STRING", "GCS_CREDENTIALS_JSON", "MY_APIKEY"],
)  # fmt: skip
def test_credential_variables_are_known_by_name(name):
    assert is_secret_env(name)


@pytest.mark.parametrize(
    "name",
    ["PWD", "OLDPWD", "HOME", "PATH", "USER", "SHELL", "TOKENIZERS_PARALLELISM", "GOOGLE_APPLICATION_CREDENTIALS",
     "AWS_SHARED_CREDENTIALS_FILE", "SSH_AUTH_SOCK", "KEYBOARD_LAYOUT", "HF_HOME"],
)  # fmt: skip
def test_ordinary_variables_are_not_secrets(name):
    assert not is_secret_env(name)


def test_the_working_directory_is_never_masked(monkeypatch, tmp_path):
    """PWD was a credential name: every path under the working directory printed as `***/...`."""
    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.setenv("OLDPWD", str(tmp_path.parent))
    text = f"the data folder {tmp_path}/data/icl"
    assert redact_text(text) == text
    assert redact_value({"data": {"local": str(tmp_path / "tok")}}) == {
        "data": {"local": str(tmp_path / "tok")}
    }


@pytest.mark.parametrize("name", ["DB_PASS", "MYSQL_PWD", "SLACK_WEBHOOK_URL"])
def test_values_of_credential_variables_are_masked_raw_and_url_encoded(monkeypatch, name):
    monkeypatch.setenv(name, SECRET)
    assert SECRET in secret_env_values() and quote(SECRET, safe="") in secret_env_values()
    raw = f"remote: s3://bucket/{SECRET}/x"
    encoded = f"https://host/path?note={quote(SECRET, safe='')}&page=2"
    for text in (raw, encoded):
        out = redact_text(text)
        assert SECRET not in out and quote(SECRET, safe="") not in out and MASK in out, out
    assert redact_value({"tags": [SECRET]}) == {"tags": [MASK]}


def test_the_user_names_more_secret_variables(monkeypatch):
    monkeypatch.setenv("GH_PAT", SECRET)
    assert not is_secret_env("GH_PAT") and SECRET in redact_text(SECRET)
    monkeypatch.setenv(SECRET_ENV_VAR, "gh_pat, MY_*_SALT")
    assert is_secret_env("GH_PAT") and is_secret_env("MY_APP_SALT") and not is_secret_env("MY_APP")
    assert redact_text(f"x {SECRET} y") == f"x {MASK} y"


@pytest.mark.parametrize("entry", ["foundry.cli:run_cli", "foundry.errors:run_tool"])
def test_a_bugs_traceback_at_an_entry_point_is_masked(entry):
    """Issue 39: a raw traceback printed a `data.remote` URL holding a secret while the lines above were masked."""
    import subprocess
    import sys

    module, func = entry.split(":")
    code = (
        f"import os, sys; from {module} import {func}\n"
        "def main():\n"
        "    raise RuntimeError('retries exhausted for s3://bucket/' + os.environ['DB_PASS'] + '/shard.mds')\n"
        f"sys.exit({func}(main))\n"
    )
    env = {**__import__("os").environ, "DB_PASS": SECRET}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "RuntimeError" in proc.stderr
    assert SECRET not in proc.stderr and "s3://bucket/***/shard.mds" in proc.stderr, proc.stderr[-1000:]


def test_a_secret_in_a_checkpoint_paths_is_masked_where_urls_are_printed(monkeypatch):
    """Issue 39: `[foundry] checkpoint .../<secret>/ep0-ba2 complete` printed the secret."""
    from streaming.storage import redact

    monkeypatch.setenv("SLACK_WEBHOOK_URL", "hooksecret-123456")
    assert redact("s3://bucket/hooksecret-123456/ep0-ba2") == "s3://bucket/***/ep0-ba2"
    assert redact("/data/runs/hooksecret-123456/ep0-ba2") == "/data/runs/***/ep0-ba2"
