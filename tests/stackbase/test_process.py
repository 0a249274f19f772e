"""`stackbase.process`: a run's process proves itself through the user's private registry (issue 39 item 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stackbase.process import claim, pid_alive, registry_dir, start_token, verify

_CHILD = (
    "import json, sys, time\n"
    "from stackbase.process import claim\n"
    "c = claim(sys.argv[1], 'rank0')\n"
    "print(json.dumps(c.proof), flush=True)\n"
    "sys.stdin.readline()\n"
)


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "procs"
    monkeypatch.setenv("FOUNDRY_PROC_DIR", str(folder))
    return folder


def _child(run: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def test_a_claim_is_proven_for_its_folder_only_and_goes_at_exit(registry: Path, tmp_path: Path) -> None:
    proc, proof = _child(tmp_path / "run")
    try:
        entry = registry / f"{proc.pid}.json"
        assert entry.stat().st_mode & 0o777 == 0o600 and registry.stat().st_mode & 0o777 == 0o700
        assert "nonce" in json.loads(entry.read_text()) and proof not in entry.read_text()
        assert verify(proc.pid, tmp_path / "run", proof) is None
        assert "another run" in str(verify(proc.pid, tmp_path / "elsewhere", proof))
        assert "proof differs" in str(verify(proc.pid, tmp_path / "run", "f" * 64))
        assert "no proof" in str(verify(proc.pid, tmp_path / "run", None))
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(timeout=30)
    assert not entry.exists()  # released at exit
    assert "gone" in str(verify(proc.pid, tmp_path / "run", proof))


def test_an_entry_others_can_read_or_a_link_proves_nothing(registry: Path, tmp_path: Path) -> None:
    proc, proof = _child(tmp_path / "run")
    try:
        entry = registry / f"{proc.pid}.json"
        entry.chmod(0o644)
        assert "never claimed" in str(verify(proc.pid, tmp_path / "run", proof))
        entry.chmod(0o600)
        moved = registry / "elsewhere.json"
        entry.rename(moved)
        entry.symlink_to(moved)
        assert "never claimed" in str(verify(proc.pid, tmp_path / "run", proof))
    finally:
        proc.kill()
        proc.wait()


def test_a_reused_pid_or_an_exec_is_another_process(registry: Path, tmp_path: Path) -> None:
    """The entry records the start token and the command line: a later process on the same pid differs."""
    run = tmp_path / "run"
    mine = claim(run, "launcher")
    entry = registry / f"{os.getpid()}.json"
    assert verify(os.getpid(), run, mine.proof) is None
    data = json.loads(entry.read_text())
    entry.write_text(json.dumps({**data, "cmdline": ["python", "-c", "something else"]}))
    assert "another process" in str(verify(os.getpid(), run, mine.proof))
    entry.write_text(json.dumps({**data, "token": "boot:1"}))
    assert "another process" in str(verify(os.getpid(), run, mine.proof))


def test_claims_of_dead_processes_are_pruned(registry: Path, tmp_path: Path) -> None:
    registry.mkdir(mode=0o700)
    (registry / "999999999.json").write_text(json.dumps({"pid": 999999999, "token": "boot:1"}))
    (registry / "junk.json").write_text("[")
    claim(tmp_path, "rank0")
    assert sorted(p.name for p in registry.iterdir()) == [f"{os.getpid()}.json"]


@pytest.mark.parametrize("pid", [-1, 0, True, "12", 2**70, None])
def test_forged_pids_are_not_processes(pid: object, registry: Path, tmp_path: Path) -> None:
    assert pid_alive(pid) is False  # kill(-1, 0) would probe every process
    assert verify(pid, tmp_path, "x" * 64) is not None


def test_an_unwritable_registry_makes_an_unbacked_claim(tmp_path: Path, monkeypatch) -> None:
    """A read-only home: training goes on, and `runs stop` refuses (the safe side)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("FOUNDRY_PROC_DIR", str(blocker / "procs"))
    made = claim(tmp_path, "rank0")
    assert made.pid == os.getpid() and verify(os.getpid(), tmp_path, made.proof) is not None


def test_registry_defaults(monkeypatch) -> None:
    monkeypatch.delenv("FOUNDRY_PROC_DIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/7")
    assert registry_dir() == Path("/run/user/7/foundry-procs")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert registry_dir() == Path.home() / ".cache" / "foundry" / "procs"
    assert start_token(os.getpid()) == start_token(os.getpid()) is not None
