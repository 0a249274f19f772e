"""`stackbase.venv`: entry scripts run in the checkout's `.venv` from a shell that never activated it (issue 40
item 1: right after `make train`, `python train.py experiment=smoke-cpu` failed with `No module named 'hydra'`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SYSTEM = next((p for p in ("/usr/bin/python3", "/usr/bin/python") if Path(p).exists()), None)


def _bare_env(tmp_path: Path) -> dict[str, str]:
    """A fresh shell's environment: no virtualenv on PATH, nothing activated."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "FOUNDRY_PROC_DIR": os.environ["FOUNDRY_PROC_DIR"],
    }


def _lacks_packages(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import hydra"], capture_output=True, env={"PATH": "/usr/bin:/bin"})
    return probe.returncode != 0


needs_system_python = pytest.mark.skipif(
    SYSTEM is None or not _lacks_packages(SYSTEM),
    reason="needs a system Python without the project's packages",
)


@needs_system_python
@pytest.mark.parametrize("script", ["scripts/export_hf.py", "scripts/convert_checkpoint.py"])
def test_a_script_run_by_the_system_python_runs_in_the_venv(tmp_path, script):
    proc = subprocess.run([SYSTEM, str(REPO / script), "--help"], capture_output=True, text=True,
                          env=_bare_env(tmp_path), cwd=tmp_path, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage:")


@needs_system_python
@pytest.mark.slow  # a short training run
def test_train_py_from_a_fresh_shell(tmp_path):
    args = ["experiment=smoke-cpu", "run_name=fresh", "data.corpus_mb=0.15", "data.vocab_size=300",
            "trainer.max_duration=2ba", "trainer.progress_bar=false"]  # fmt: skip
    proc = subprocess.run([SYSTEM, str(REPO / "train.py"), *args], capture_output=True, text=True,
                          env={**_bare_env(tmp_path), "FOUNDRY_CACHE": str(tmp_path / "cache")}, cwd=tmp_path,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "outputs" / "fresh" / "final_metrics.json").is_file()


@needs_system_python
def test_without_a_venv_it_says_to_run_make_install(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "src").mkdir(parents=True)
    shutil.copytree(REPO / "src" / "stackbase", checkout / "src" / "stackbase")
    shutil.copy(REPO / "scripts" / "export_hf.py", checkout / "export_hf.py")
    for name in ("pyproject.toml", "train.py"):
        (checkout / name).write_text("")
    (checkout / "scripts").mkdir()
    shutil.move(checkout / "export_hf.py", checkout / "scripts" / "export_hf.py")
    proc = subprocess.run([SYSTEM, str(checkout / "scripts" / "export_hf.py"), "--help"], capture_output=True,
                          text=True, env=_bare_env(tmp_path), timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: this Python") and "make install" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_an_interpreter_with_the_packages_is_left_alone():
    code = "from stackbase.venv import use_project_venv; use_project_venv(__file__ if False else 'x'); print('stayed')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "stayed", proc.stderr
