"""Health checks, the events file, the heartbeat callback and the launcher's command-line parsing."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from foundry.callbacks import CallbacksConfig, Heartbeat, build_callbacks
from foundry.callbacks.heartbeat import HEARTBEAT_ENV, read_beats
from foundry.errors import ConfigError
from foundry.launch import append_event, read_events
from foundry.launch.cli import run_name_of, split_command
from foundry.launch.health import HealthError, check_all_reduce, check_devices, check_disk, check_store
from foundry.launch.worker import exit_note_for, read_exit_notes, write_exit_note


def test_events_append_and_read(tmp_path):
    assert read_events(tmp_path) == []
    append_event(tmp_path, "start", run_name="x")
    append_event(tmp_path, "failure", rank=1, cause="exited")
    events = read_events(tmp_path)
    assert [(e["event"], e.get("rank")) for e in events] == [("start", None), ("failure", 1)]
    assert all(isinstance(e["time"], float) for e in events)


def test_health_checks_pass_on_this_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    check_devices(cuda=False)
    check_disk(tmp_path / "run", min_free_gb=0.001)
    check_store(str(tmp_path))
    check_all_reduce(attempt=0)  # one rank: nothing to reduce


def test_health_failures_name_the_check(tmp_path):
    with pytest.raises(HealthError, match="'disk'.*--min-free-gb") as e:
        check_disk(tmp_path, min_free_gb=1e9)
    assert e.value.check == "disk"
    with pytest.raises(HealthError, match="'store'.*no such folder"):
        check_store(str(tmp_path / "missing"))


def test_cuda_check_fails_without_a_gpu(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(HealthError, match="'devices'.*CUDA"):
        check_devices(cuda=True)


def test_heartbeat_callback_writes_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    cb = Heartbeat(tmp_path)
    trainer = SimpleNamespace(state=SimpleNamespace(step=6))
    cb.on_fit_start(trainer)
    assert read_beats(tmp_path)[1].phase == "fit"
    trainer.state.step = 7
    assert cb.on_step_end(trainer, step_seconds=0.25) == {}
    beat = read_beats(tmp_path)[1]
    assert (beat.step, beat.phase, beat.attempt, beat.pid, beat.step_seconds) == (
        7,
        "step",
        2,
        os.getpid(),
        0.25,
    )
    cb.on_fit_end(trainer)
    assert json.loads((tmp_path / "rank1.json").read_text())["phase"] == "done"


def test_heartbeat_registered_only_under_the_launcher(tmp_path, monkeypatch):
    monkeypatch.delenv(HEARTBEAT_ENV, raising=False)
    assert not any(isinstance(c, Heartbeat) for c in build_callbacks(CallbacksConfig(), world_size=1))
    monkeypatch.setenv(HEARTBEAT_ENV, str(tmp_path))
    assert any(isinstance(c, Heartbeat) for c in build_callbacks(CallbacksConfig(), world_size=1))


def test_command_line_split_and_run_name(monkeypatch):
    assert split_command(["--nproc-per-node=2", "--", "train.py", "a=1"]) == (
        ["--nproc-per-node=2"],
        ["train.py", "a=1"],
    )
    with pytest.raises(ConfigError, match="usage"):
        split_command(["train.py"])

    def generate(overrides: list[str]) -> str:
        return "pretrain-mpt-tiny-20261126-175501"

    assert run_name_of(["a=1", "run_name=r"], generate=generate) == ("r", ["a=1", "run_name=r"])
    monkeypatch.delenv("RUN_NAME", raising=False)
    name, overrides = run_name_of(["a=1"], generate=generate)
    assert name == generate([]) and overrides == ["a=1", f"run_name={name}"]


def test_exit_notes_only_for_exits_a_restart_cannot_fix(tmp_path):
    assert exit_note_for(1, rank=0, attempt=0, step=5) is None, "a crash: torchrun restarts"
    assert exit_note_for(0, rank=0, attempt=0, step=5) is None
    kinds = {code: exit_note_for(code, rank=1, attempt=2, step=5) for code in (2, 3, 75)}
    assert {c: (n.kind, n.cause) for c, n in kinds.items() if n} == {
        2: ("fatal", "config"),
        3: ("fatal", "health"),
        75: ("preempted", "preempted"),
    }
    write_exit_note(tmp_path, kinds[75])  # type: ignore[arg-type]
    assert read_exit_notes(tmp_path) == {1: kinds[75]}
    assert read_beats(tmp_path) == {}, "notes are not beats"
