"""`scripts/export_hf.py`, `generate.py`, `convert_checkpoint.py`: a user mistake is one `error: ...` line on
stderr naming the argument and the fix, exit code 2, no traceback (`foundry.errors.run_tool`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from foundry.errors import run_tool
from foundry.models.mpt import MPTConfig, MPTForCausalLM

REPO = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_script", REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _one_error_line(err: str, *needles: str) -> None:
    lines = [line for line in err.splitlines() if "error" in line.lower()]  # progress bars aside
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    assert err.rstrip().endswith(lines[0])
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["export_hf.py", "--src", "{tmp}/nope", "--out", "{tmp}/o"], ["--src", "no such file or folder"]),
        (["generate.py", "--model", "{tmp}/nope", "--prompt", "hi"], ["--model", "no such file or folder"]),
        (
            ["convert_checkpoint.py", "--src", "{tmp}/nope", "--dst", "{tmp}/o", "--to", "full"],
            ["--src", "no such file or folder"],
        ),
    ],
)
def test_a_missing_path_is_one_error_line_and_exit_2(tmp_path, args, needles):
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / argv[0]), *argv[1:]],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    _one_error_line(proc.stderr, *needles)
    assert "is a weights file" not in proc.stderr  # it is missing, not a weights file


def _run(mod: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert run_tool(lambda: mod.main(argv)) == 2
    return capsys.readouterr().err


def test_generate_does_not_take_a_missing_relative_folder_for_a_hub_id(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    err = _run(_script("generate"), ["--model", "outputs/nosuch", "--prompt", "hi"], capsys)
    _one_error_line(err, "--model outputs/nosuch: no such file or folder")


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--chat", "{not json"], ["--chat #1 is not JSON"]),
        (["--chat", '{"role": "user"}'], ["--chat #1: expected a JSON list"]),
        (["--prompts-file", "{tmp}/none.txt", "--prompt", "x"], ["--prompts-file", "no such file"]),
        (["--adapter", "{tmp}/none"], ["--adapter", "no such file"]),
        ([], ["nothing to complete"]),
    ],
)
def test_generate_rejects_bad_arguments_before_loading(tmp_path, capsys, monkeypatch, extra, needles):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    argv = ["--model", str(tmp_path), *(a.replace("{tmp}", str(tmp_path)) for a in extra)]
    _one_error_line(_run(_script("generate"), argv, capsys), *needles)


def test_export_to_hf_mpt_of_a_model_it_cannot_be_names_the_fix(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    cfg = MPTConfig(
        d_model=16, n_heads=2, n_layers=1, max_seq_len=16, vocab_size=64, attn_config={"rope": True}
    )
    MPTForCausalLM(cfg).save_pretrained(tmp_path / "m")
    argv = ["--src", str(tmp_path / "m"), "--out", str(tmp_path / "o"), "--format", "hf_mpt"]
    err = _run(_script("export_hf"), argv, capsys)
    _one_error_line(err, "cannot export to transformers' MPT format", "--format")
    assert not (tmp_path / "o" / "model.safetensors").exists()


def test_export_of_a_weights_file_without_config_names_both_flags(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    torch.save({}, tmp_path / "w.pt")
    err = _run(_script("export_hf"), ["--src", str(tmp_path / "w.pt"), "--out", str(tmp_path / "o")], capsys)
    _one_error_line(err, "--src", "--config")


def test_hydra_full_error_keeps_the_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    err = _run(
        _script("convert_checkpoint"), ["--src", str(tmp_path / "x"), "--dst", "d", "--to", "full"], capsys
    )
    assert err.startswith("Traceback") and err.rstrip().splitlines()[-1].startswith("error: --src")
