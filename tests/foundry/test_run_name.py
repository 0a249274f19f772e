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


LLMFOUNDRY_YAML = (
    Path(__file__).resolve().parents[2].parent / "shared/data/llmfoundry_yamls/pretrain/mpt-small-cpu.yaml"
)
RUN_FILES = ("config.yaml", "run.json", "train.log", ".hydra", "checkpoints", "outputs")


@pytest.mark.parametrize(
    ("args", "env"),
    [(["run_name=.."], {}), (["run_name=."], {}), (["run_name=a\\b"], {}), ([], {"RUN_NAME": ".."}),
     (["llmfoundry=YAML"], {})],
    ids=["dotdot", "dot", "backslash", "env", "llmfoundry-yaml"],
)  # fmt: skip
def test_a_run_name_that_is_not_one_folder_is_refused_before_anything_is_written(tmp_path, args, env):
    """Issue 39: `run_name=..` made `outputs/..` the run directory: config.yaml, run.json, train.log and the
    checkpoints were written into the caller's folder."""
    from tests.train_py import run_train_py

    work = tmp_path / "work"
    work.mkdir()
    if args == [
        "llmfoundry=YAML"
    ]:  # llm-foundry's own CPU YAML with `run_name: ..` (the translator passes it on)
        if not LLMFOUNDRY_YAML.exists():
            pytest.fail(
                f"{LLMFOUNDRY_YAML} is missing: the shared llm-foundry YAMLs are part of the test data"
            )
        yaml = tmp_path / "run.yaml"
        yaml.write_text(LLMFOUNDRY_YAML.read_text().replace("run_name: mpt_causal_lm_cpu", 'run_name: ".."'))
        args = [f"llmfoundry={yaml}"]
    else:
        args = ["model=mpt-tiny", "trainer.max_duration=1ba", *args]
    proc = run_train_py(args, work, ok=False, full_error=False, env=env)
    err = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2 and err[-1].startswith("error: run_name="), proc.stderr[-2000:]
    assert "use a plain name such as my-run-1" in err[-1] and "Traceback" not in proc.stderr
    assert not [p.name for p in work.iterdir() if p.name in RUN_FILES]
    assert not (tmp_path / "config.yaml").exists() and not (tmp_path / "run.json").exists()
