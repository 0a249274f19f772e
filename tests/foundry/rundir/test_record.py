"""A refused command touches nothing: the run's files are written only once the run is accepted (after the
data is built and the checkpoint it resumes checked); a refused new run leaves no folder."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from foundry.config import register_configs, to_train_config
from foundry.errors import ConfigError
from foundry.run_log import DeferredFileHandler, discard_run_logs, release_run_logs
from foundry.rundir.record import RunRecord
from foundry.tasks.pretrain import pretrain
from tests.train_py import run_train_py

CONF = Path(__file__).resolve().parents[3] / "conf"


def _cfg(cache: Path, *overrides: str):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(
            "train",
            overrides=[
                "experiment=smoke-cpu",
                f"data.local={cache}",
                "data.corpus_mb=0.15",
                "data.vocab_size=300",
                "trainer.max_duration=2ba",
                "run_name=quickstart",
                *overrides,
            ],
        )
    return to_train_config(cfg)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _record(run_dir: Path) -> RunRecord:
    return RunRecord(
        run_dir, write_files=lambda: (run_dir / "config.yaml").write_text("the command's config\n")
    )


def test_a_refused_resume_leaves_the_existing_runs_files_byte_identical(tmp_path):
    run_dir = tmp_path / "outputs" / "quickstart"
    run_dir.mkdir(parents=True)
    pretrain(_cfg(tmp_path / "cache"), run_dir=run_dir, record=_record(run_dir))
    before = _files(run_dir)
    assert {"config.yaml", "run.json", "metrics.jsonl", "checkpoints/ep0-ba2/manifest.json"} <= set(before)
    record = _record(run_dir)
    with pytest.raises(ConfigError) as info:
        pretrain(_cfg(tmp_path / "cache", "model.n_layers=3"), run_dir=run_dir, record=record)
    assert _files(run_dir) == before  # was: run.json rewritten (and the loggers started) before the check
    assert record.state == "pending" and not record.created
    message = str(info.value)  # names the run and the checkpoint, offers a new run_name= first
    assert "run 'quickstart' cannot resume from its checkpoint" in message
    assert str(run_dir / "checkpoints" / "ep0-ba2") in message
    assert "model.n_layers: checkpoint 2, config 3" in message
    assert message.index("run_name=") < message.index("restore those values")


def test_a_run_record_refused_removes_the_folder_it_created_and_only_that(tmp_path):
    new = tmp_path / "new"
    new.mkdir()  # Hydra made it; nothing in it yet
    record = RunRecord(new)
    (new / ".checkpoint-scratch").mkdir()  # a remote checkpoint listed before the refusal
    record.refuse()
    assert not new.exists()
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.yaml").write_text("x")
    RunRecord(old).refuse()
    assert (old / "config.yaml").read_text() == "x"
    opened = RunRecord(tmp_path / "opened", write_files=lambda: (tmp_path / "opened" / "f").write_text("y"))
    opened.open()
    opened.refuse()  # a failure after the run was accepted is the run's own: its files stay
    assert (tmp_path / "opened" / "f").read_text() == "y"


def test_train_log_lines_are_held_until_the_run_is_accepted_and_dropped_if_refused(tmp_path):
    root = logging.getLogger()
    for name, accept in (("accepted", True), ("refused", False)):
        handler = DeferredFileHandler(str(tmp_path / f"{name}.log"))
        root.addHandler(handler)
        try:
            root.warning("building the data")
            assert not (tmp_path / f"{name}.log").exists()
            release_run_logs() if accept else discard_run_logs()
            root.warning("after the decision")
        finally:
            root.removeHandler(handler)
            handler.close()
    assert (tmp_path / "accepted.log").read_text() == "building the data\nafter the decision\n"
    assert not (tmp_path / "refused.log").exists()


def test_a_refused_command_leaves_no_run_folder(tmp_path):
    proc = run_train_py(["experiment=smoke-cpu", "task=bogus"], tmp_path, ok=False, full_error=False)
    assert proc.returncode == 2 and proc.stderr.count("error:") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").iterdir())
