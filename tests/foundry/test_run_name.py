"""Run names: an unnamed command gets a new, readable name (task, model, time); a named one keeps its name; a
launcher fixes one name for all its restarts; ranks of one torchrun launch agree without a clock."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from foundry.errors import ConfigError
from foundry.launch.cli import new_run_name
from foundry.launch.compose import compose_run_name
from foundry.run_name import default_run_name, fresh_run_name, run_name_given

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
STAMP = r"\d{8}-\d{6}"


def test_a_fresh_name_is_task_model_stamp_with_a_suffix_while_taken():
    taken = {"pretrain-mpt-tiny-20261126-175501", "pretrain-mpt-tiny-20261126-175501-2"}
    assert fresh_run_name("pretrain", "mpt-tiny", stamp="20261126-175501", taken=lambda n: False) == (
        "pretrain-mpt-tiny-20261126-175501"
    )
    assert fresh_run_name("pretrain", "mpt-tiny", stamp="20261126-175501", taken=taken.__contains__) == (
        "pretrain-mpt-tiny-20261126-175501-3"
    )
    assert fresh_run_name("eval", None, stamp="x", taken=lambda n: False) == "eval-x"
    assert fresh_run_name("finetune", "a/b c", stamp="1", taken=lambda n: False) == "finetune-a-b-c-1"


def test_the_resolver_takes_run_name_from_the_environment_first():
    assert default_run_name("pretrain", environ={"RUN_NAME": "mine", "WORLD_SIZE": "8"}) == "mine"


def test_torchrun_ranks_share_a_name_from_the_rendezvous_id_and_several_ranks_without_one_are_refused():
    env = {"TORCHELASTIC_RUN_ID": "3f2a9c1b-5d6e-4f70-8a9b-0c1d2e3f4a5b", "WORLD_SIZE": "2"}
    names = {default_run_name("pretrain", environ={**env, "RANK": str(r)}) for r in range(2)}
    assert names == {"pretrain-3f2a9c1b"}  # model unknown outside a Hydra app
    assert default_run_name("pretrain", environ={"TORCHELASTIC_RUN_ID": "mpt7b"}) == "pretrain-mpt7b"
    with pytest.raises(ConfigError, match=r"pass run_name=<name>.*--standalone"):
        default_run_name("pretrain", environ={"TORCHELASTIC_RUN_ID": "none", "WORLD_SIZE": "2"})


def test_an_unnamed_command_gets_a_new_readable_name_and_a_taken_one_a_suffix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUN_NAME", raising=False)
    name = compose_run_name([], CONF)  # was `quickstart`: every unnamed command resumed the quick start
    assert re.fullmatch(rf"pretrain-mpt-tiny-{STAMP}", name), name
    assert re.fullmatch(
        rf"finetune-mpt-tiny-{STAMP}(-\d+)?", compose_run_name(["experiment=finetune-cpu"], CONF)
    )
    assert re.fullmatch(rf"pretrain-mpt-125m-{STAMP}(-\d+)?", compose_run_name(["model=mpt-125m"], CONF))
    (tmp_path / "outputs" / name).mkdir(parents=True)
    (tmp_path / "outputs" / f"{name}-2").mkdir()
    monkeypatch.setattr("foundry.run_name._stamp", lambda: name.removeprefix("pretrain-mpt-tiny-"))
    assert compose_run_name([], CONF) == f"{name}-3"


def test_a_named_run_keeps_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUN_NAME", raising=False)
    assert compose_run_name(["run_name=quickstart"], CONF) == "quickstart"
    monkeypatch.setenv("RUN_NAME", "from-env")
    assert compose_run_name([], CONF) == "from-env"
    assert compose_run_name(["experiment=finetune-cpu"], CONF) == "from-env"


def test_the_launcher_names_an_unnamed_run_once_as_train_py_would(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUN_NAME", raising=False)
    name = new_run_name(str(REPO / "train.py"))(["model=mpt-125m", "task=pretrain"])
    assert re.fullmatch(rf"pretrain-mpt-125m-{STAMP}", name), name
    script = tmp_path / "job.py"  # a script without conf/ beside it
    script.write_text("")
    assert new_run_name(str(script))([]).startswith("launch-")


def test_run_name_given_means_an_override_or_the_environment():
    assert run_name_given(["a=1", "run_name=x"], {})
    assert run_name_given(["++run_name=x"], {})
    assert run_name_given([], {"RUN_NAME": "x"})
    assert not run_name_given(["a=1", "data.run_name_x=1"], {})
