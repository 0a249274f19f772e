"""`train.py`'s error reporting (`foundry.cli`): a user error is `error: <message>` and exit code 2, no
traceback unless `HYDRA_FULL_ERROR=1`; bugs keep their traceback."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException

from foundry.cli import run_cli, user_message
from foundry.config import register_configs
from foundry.errors import ConfigError
from tests.train_py import run_train_py

REPO = Path(__file__).resolve().parents[2]


def _raiser(err: BaseException):
    def main() -> None:
        raise err

    return main


@pytest.mark.parametrize(
    "err",
    [
        ConfigError("model.d_model=0: must be > 0"),
        ValueError("tokenizer.name='/x.json': file not found"),
        FileNotFoundError("data.local=/d has no train split: run convert_dataset_hf.py"),
        MissingConfigException("In 'train': Could not find 'data/nope'", missing_cfg_file="data/nope"),
    ],
)
def test_user_errors_print_the_message_alone_and_exit_2(err, capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    assert run_cli(_raiser(err)) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {str(err).strip()}\n" and "Traceback" not in captured.out
    assert "HYDRA_FULL_ERROR" not in os.environ  # restored


def test_hydra_full_error_adds_the_traceback(capsys, monkeypatch):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    assert run_cli(_raiser(ConfigError("bad value"))) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith("error: bad value\n")
    assert os.environ["HYDRA_FULL_ERROR"] == "1"


@pytest.mark.parametrize(
    ("err", "needle"),
    [
        (OSError(errno.ENOSPC, "No space left on device", "/data/cache/shard.mds"), "no space left"),
        (OSError(errno.EROFS, "Read-only file system", "outputs/run"), "read-only file system"),
        (PermissionError(errno.EACCES, "Permission denied", "outputs"), "permission denied"),
        (NotADirectoryError(errno.ENOTDIR, "Not a directory", "outputs/run"), "a file stands where a folder"),
        (OSError(errno.EDQUOT, "Disk quota exceeded", "/ck/ep0"), "disk quota exceeded"),
    ],
)
def test_a_full_disk_or_an_unwritable_folder_is_one_error_line(err, needle, capsys, monkeypatch):
    """Issue 39 item 10: a full disk during the quick-start build or a read-only `outputs/` ended in a raw
    `OSError` traceback."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    assert run_cli(_raiser(err)) == 2
    out = capsys.readouterr().err
    assert out.startswith(f"error: {err.filename}: {needle}") and len(out.splitlines()) == 1, out
    assert "write elsewhere" in out or "folder" in out


def test_other_os_errors_are_bugs(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(ConnectionResetError):
        run_cli(_raiser(ConnectionResetError(errno.ECONNRESET, "reset")))


def test_bugs_keep_their_traceback(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(RuntimeError, match="a bug"):
        run_cli(_raiser(RuntimeError("a bug")))


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("modle=mpt-125m", ["unknown config key 'modle'", "did you mean 'model'? (e.g. model=mpt-125m)"]),
        ("model.d_modle=5", ["unknown config key 'model.d_modle'", "did you mean 'model.d_model'?"]),
    ],
)
def test_hydras_append_advice_becomes_a_suggestion(override, needles):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        with pytest.raises(ConfigCompositionException) as info:
            compose("train", overrides=[override])
    text = user_message(info.value)
    assert all(n in text for n in needles), text
    assert "+" + override not in text.replace("`+key=value`", "")  # no advice to add the typo with '+'


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [
        ("model=mpt-tinny", "did you mean model=mpt-tiny?"),
        ("data=finetune/instruct-cpuu", "did you mean data=finetune/instruct-cpu?"),
        ("model=zzzz", "model has no option 'zzzz'"),
    ],
)
def test_a_group_option_typo_names_the_closest_option_and_hides_internal_bases(override, suggestion):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        with pytest.raises(MissingConfigException) as info:
            compose("train", overrides=[override])
    text = user_message(info.value)
    assert suggestion in text, text
    assert "\n" not in text and "_mpt" not in text and "_hf_causal_lm" not in text and "_finetune" not in text


def _train(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full_error = env.pop("HYDRA_FULL_ERROR", None) == "1"
    return run_train_py(args, cwd, ok=None, timeout=300, full_error=full_error, env=env)


def _assert_user_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-4000:]
    assert "error: " in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr[-4000:]


def test_train_py_rejects_a_plus_typo_with_exit_2_and_no_traceback(tmp_path):
    proc = _train(["+modle=mpt-125m", "run_name=bad"], tmp_path)
    _assert_user_error(proc, "unknown config key 'modle'", "did you mean 'model'?")
    assert not (tmp_path / "outputs" / "bad" / "config.yaml").exists()


def test_train_py_with_a_file_where_outputs_goes_is_one_error_line(tmp_path):
    (tmp_path / "outputs").write_text("not a folder")
    proc = _train(["experiment=smoke-cpu", "run_name=r"], tmp_path)
    _assert_user_error(proc, "outputs/r: a file stands where a folder is needed", "move that file away")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_train_py_leaves_the_running_jobs_config_alone(tmp_path):
    run_dir = tmp_path / "outputs" / "live"
    run_dir.mkdir(parents=True)
    written = "# the config of the job running in this directory\n"
    (run_dir / "config.yaml").write_text(written)
    proc = _train(["task=finetune", "run_name=live"], tmp_path)
    _assert_user_error(proc, "task=finetune")
    assert (run_dir / "config.yaml").read_text() == written


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["+train_loader.name=finetuning"], ["unknown config key 'train_loader'", "llm-foundry key"]),
        (["optimizer.lr=abc"], ["optimizer.lr"]),
        (["data=nope"], ["Could not find 'data/nope'"]),
        (["data=c4"], ["convert_dataset_hf.py"]),  # missing data
        (["task=eval", "eval=offline", "data=c4", "tokenizer.name=/nonexistent/tok.json"], ["/nonexistent"]),
    ],
)
def test_train_py_user_errors_end_to_end(tmp_path, args, needles):
    proc = _train([*args, "run_name=bad"], tmp_path, FOUNDRY_DATA=str(tmp_path / "data"))
    _assert_user_error(proc, *needles)


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [("experiment=finetune-cpuu", "experiment=finetune-cpu"), ("debug=overfit-bach", "debug=overfit-batch")],
)
def test_train_py_rejects_an_optional_group_typo_instead_of_ignoring_it(tmp_path, override, suggestion):
    proc = _train([override, "run_name=typo"], tmp_path)  # Hydra skips a missing optional option silently
    _assert_user_error(proc, f"Could not find '{override.replace('=', '/')}'", f"did you mean {suggestion}?")
    assert not (tmp_path / "outputs" / "typo" / "config.yaml").exists()
