"""Credentials in config values never reach the run directory, Hydra's files, the W&B run or the logs.

`train.py` runs in a subprocess (as users run it) with a signed URL holding user info and a `sig=` parameter,
a plain token under a credential key, and the same URL in the tags; then every file the run wrote is read as
bytes (the binary `.wandb` file included) and must hold none of the secrets, while the redacted form is
there (the values were recorded, only masked). The in-process tests check the real values stay usable.
"""

from __future__ import annotations

import copy
import json
import logging
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from foundry.hydra_callbacks import RedactingFilter, redacted_yaml
from foundry.train.metadata import write_run_metadata
from tests.train_py import run_train_py

REPO = Path(__file__).resolve().parents[2]
TINY = ["data.corpus_mb=0.15", "data.vocab_size=300", "trainer.max_duration=2ba"]
SECRETS = (b"tok3n", b"SECRET", b"PLAINTOK")
URL = "https://user:tok3n@host/x?sig=SECRET"
WITH_SECRETS = [
    f"+variables.url='{URL}'",
    "+variables.token=PLAINTOK",
    f"tags=[smoke,'{URL}']",
    f"logger.wandb.tags=['{URL}']",
]


def _train(args: list[str], cwd: Path, *, ok: bool = True) -> subprocess.CompletedProcess:
    return run_train_py(args, cwd, ok=ok, text=False)


def _leaks(root: Path) -> dict[str, list[bytes]]:
    """Every file (and file or folder name) under `root` that holds a secret, with the secrets it holds."""
    found: dict[str, list[bytes]] = {}
    for path in root.rglob("*"):
        rel = str(path.relative_to(root)).encode()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        hits = [s for s in SECRETS if s in data or s in rel]
        if hits:
            found[str(path)] = hits
    return found


@pytest.mark.slow
def test_a_run_with_credentials_writes_them_nowhere(tmp_path):
    proc = _train(["experiment=smoke-cpu", "run_name=sec", "logger=wandb", *TINY, *WITH_SECRETS], tmp_path)
    run_dir = tmp_path / "outputs" / "sec"
    wandb_files = list((run_dir / "wandb").rglob("*.wandb"))
    assert wandb_files, "W&B wrote no offline run"
    for name in (
        "config.yaml",
        "run.json",
        "train.log",
        ".hydra/rank0/config.yaml",
        ".hydra/rank0/hydra.yaml",
    ):
        assert (run_dir / name).is_file(), name
    assert _leaks(tmp_path / "outputs") == {}
    assert not any(s in proc.stdout + proc.stderr for s in SECRETS)
    # recorded, only masked
    masked = "https://***@host/x?sig=***"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["config"]["variables"] == {"url": masked, "token": "***"}
    assert run["config"]["tags"] == ["smoke", masked]
    assert OmegaConf.load(run_dir / "config.yaml").variables.url == masked
    assert f"+variables.url='{masked}'" in OmegaConf.load(run_dir / ".hydra/rank0/overrides.yaml")
    assert masked.encode() in wandb_files[0].read_bytes()


def test_a_failed_job_prints_one_error_line_without_secrets(tmp_path):
    # `task=bogus` fails the schema check in the task, after Hydra set up the run directory and its logs;
    # the refused run leaves nothing behind (foundry.tasks.run_record). Issue 26 item 11: Hydra's "Error
    # executing job with overrides" line (the whole command again) no longer precedes the error.
    args = ["experiment=smoke-cpu", "run_name=bad", "task=bogus", *WITH_SECRETS[:3]]
    proc = _train(args, tmp_path, ok=False)
    assert b"Error executing job with overrides" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith(b"error:")], proc.stderr
    assert not any(s in proc.stdout + proc.stderr for s in SECRETS)
    assert not (tmp_path / "outputs" / "bad").exists()
    assert _leaks(tmp_path) == {}


@pytest.mark.slow
def test_a_sweep_names_job_folders_and_writes_files_without_credentials(tmp_path):
    proc = _train(
        ["-m", "experiment=smoke-cpu", "run_name=grid", "optimizer.lr=1e-3,3e-4", *TINY, *WITH_SECRETS[:3]],
        tmp_path,
    )
    sweep = tmp_path / "outputs" / "multirun" / "grid"
    assert (sweep / "multirun.yaml").is_file() and list(sweep.glob("summary*.md"))
    assert len(list(sweep.rglob("final_metrics.json"))) == 2
    assert _leaks(tmp_path / "outputs") == {}
    assert not any(s in proc.stdout + proc.stderr for s in SECRETS)


@dataclass
class _Data:
    remote: str = URL
    local: str = "/tmp/cache"


@dataclass
class _Cfg:
    data: _Data = field(default_factory=_Data)
    variables: dict = field(default_factory=lambda: {"api_key": "PLAINTOK"})


def test_run_json_is_redacted_and_the_config_keeps_its_real_values(tmp_path):
    cfg = _Cfg()
    before = copy.deepcopy(cfg)
    write_run_metadata(tmp_path, config=cfg, derived={"steps": 2}, device=torch.device("cpu"))
    assert cfg == before and cfg.data.remote == URL  # the data backend still gets the signed URL
    written = (tmp_path / "run.json").read_bytes()
    assert not any(s in written for s in SECRETS)
    assert json.loads(written)["config"]["data"] == {
        "remote": "https://***@host/x?sig=***",
        "local": "/tmp/cache",
    }


def test_redacted_yaml_leaves_the_dictconfig_unchanged():
    cfg = OmegaConf.create({"data": {"remote": URL}, "token": "PLAINTOK", "alias": "${data.remote}"})
    text = redacted_yaml(cfg, resolve=True)
    assert not any(s.decode() in text for s in SECRETS)
    assert cfg.data.remote == URL and cfg.token == "PLAINTOK" and cfg.alias == URL


def test_logging_filter_masks_the_message():
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "opening %s with %s", (URL, "token=PLAINTOK"), None
    )
    assert RedactingFilter().filter(record)
    assert record.getMessage() == "opening https://***@host/x?sig=*** with token=***"


# ----------------------------------------------------------------------------- issue 27: secrets by value

ENV_SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "HF_TOKEN": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz",
}


def _env_leaks(root: Path) -> list[str]:
    values = [v.encode() for v in ENV_SECRETS.values()]
    return [str(p) for p in root.rglob("*") if any(v in str(p).encode() or (p.is_file() and v in p.read_bytes()) for v in values)]  # fmt: skip


@pytest.mark.slow
def test_secrets_from_the_environment_are_masked_by_value_everywhere(tmp_path, monkeypatch):
    """Before: `${oc.env:AWS_SECRET_ACCESS_KEY}` in a variable, a tag or `data.remote` reached config.yaml,
    run.json, .hydra/, train.log and the console in plain text (redaction went by key name and URL pattern)."""
    for k, v in ENV_SECRETS.items():
        monkeypatch.setenv(k, v)
    args = [
        "experiment=smoke-cpu", "run_name=envsec", *TINY,
        "+variables.creds='${oc.env:AWS_SECRET_ACCESS_KEY}'",
        "+variables.who='id ${oc.env:AWS_ACCESS_KEY_ID}'",
        "tags=[smoke,'${oc.env:HF_TOKEN}']",
    ]  # fmt: skip
    proc = _train(args, tmp_path)
    assert not any(v.encode() in proc.stdout + proc.stderr for v in ENV_SECRETS.values())
    assert _env_leaks(tmp_path / "outputs") == []
    run = json.loads((tmp_path / "outputs" / "envsec" / "run.json").read_text())
    assert run["config"]["variables"]["creds"] == "${oc.env:AWS_SECRET_ACCESS_KEY}"  # issue 39: by source
    assert run["config"]["tags"] == ["smoke", "${oc.env:HF_TOKEN}"]  # issue 39: recorded by source


@pytest.mark.slow
def test_records_keep_environment_interpolations_whatever_the_variables_name(tmp_path, monkeypatch):
    """Issue 39 item 3: `${oc.env:DB_PASS}`, `MYSQL_PWD`, `SLACK_WEBHOOK_URL` (and any name: masking by value
    needs a credential-like one) landed resolved in config.yaml, run.json and the loggers' parameters. Records
    now keep the interpolation itself; the run still uses the value."""
    values = {
        "DB_PASS": "pg-Zq81x",
        "SLACK_WEBHOOK_URL": "https://hooks.example/T0/B0/xyzzy",
        "SITE": "corp-7h2",
    }
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    args = [
        "experiment=smoke-cpu", "run_name=bysource", *TINY, "logger=tensorboard",
        "+variables.db='${oc.env:DB_PASS}'", "+variables.hook='${oc.env:SLACK_WEBHOOK_URL}'",
        "+variables.site='dc-${oc.env:SITE}'", "+variables.copy='${variables.site}'",
        "tags=[smoke,'${oc.env:SITE}']",
    ]  # fmt: skip
    _train(args, tmp_path)
    run_dir = tmp_path / "outputs" / "bysource"
    leaks = [
        str(p)
        for p in run_dir.rglob("*")
        if p.is_file()
        for v in values.values()
        if v.encode() in p.read_bytes()
    ]
    assert leaks == []
    config = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=False)
    assert config["variables"] == {"db": "${oc.env:DB_PASS}", "hook": "${oc.env:SLACK_WEBHOOK_URL}",
                                   "site": "dc-${oc.env:SITE}", "copy": "dc-${oc.env:SITE}"}  # fmt: skip
    assert "+variables.db='${oc.env:DB_PASS}'" in (run_dir / ".hydra/rank0/overrides.yaml").read_text()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["config"]["tags"] == ["smoke", "${oc.env:SITE}"]
    assert run["config"]["variables"]["copy"] == "dc-${oc.env:SITE}"


def test_a_run_name_holding_a_secret_is_refused_without_printing_it(tmp_path, monkeypatch):
    for k, v in ENV_SECRETS.items():
        monkeypatch.setenv(k, v)
    proc = _train(
        ["experiment=smoke-cpu", "run_name=run-${oc.env:AWS_ACCESS_KEY_ID}", *TINY], tmp_path, ok=False
    )
    assert proc.returncode == 2 and b"error: run_name='run-***' holds a credential" in proc.stderr
    assert not any(v.encode() in proc.stdout + proc.stderr for v in ENV_SECRETS.values())
    assert _env_leaks(tmp_path) == []


def test_a_mistyped_override_does_not_echo_its_password(tmp_path):
    proc = _train(["experiment=smoke-cpu", "+variables.pw=Hunt3r2Secret[oops"], tmp_path, ok=False)
    assert proc.returncode == 2 and b"Hunt3r2Secret" not in proc.stdout + proc.stderr, proc.stderr[-2000:]


def test_redaction_by_value_and_the_pw_parameter(monkeypatch):
    from stackbase.secrets import redact_text, redact_value

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ENV_SECRETS["AWS_SECRET_ACCESS_KEY"])
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/home/me/creds.json")  # a path, not a secret
    secret = ENV_SECRETS["AWS_SECRET_ACCESS_KEY"]
    assert redact_text(f"s3 key {secret} used") == "s3 key *** used"
    assert redact_value({"tags": [f"x{secret}"], "note": "/home/me/creds.json"}) == {
        "tags": ["x***"],
        "note": "/home/me/creds.json",
    }
    assert redact_text("https://host/db?user=a&pw=hunter22") == "https://host/db?user=a&pw=***"
