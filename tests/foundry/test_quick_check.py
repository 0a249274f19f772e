"""`foundry.quick_check` and the key index it reads (`conf/_keys.json`, `foundry.config_index`): config mistakes
are answered before torch loads (issue 40 item 7), and nothing the full check accepts is refused."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foundry.config_index import INDEX_NAME, index_text
from foundry.quick_check import check_overrides

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"


def test_the_committed_index_is_up_to_date() -> None:
    assert (CONF / INDEX_NAME).read_text() == index_text(), (
        "run `make config-index` and commit conf/_keys.json"
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["modle=mpt-125m"], "unknown config key 'modle': did you mean 'model'? (e.g. model=mpt-125m)"),
        (["model.d_modle=5"], "unknown config key 'model.d_modle': did you mean 'model.d_model'?"),
        (["traner.max_duration=5ba"], "unknown config key 'traner': did you mean 'trainer'?"),
        (["model=mpt-tinny"], "Could not find 'model/mpt-tinny': did you mean model=mpt-tiny?"),
        (["data=finetune/instruct-cpuu"], "did you mean data=finetune/instruct-cpu?"),
        (["experiment=finetune-cpuu"], "did you mean experiment=finetune-cpu?"),
        (["+train_loader.name=finetuning"], "that is an llm-foundry key; here it is data=..."),
        (["model.d_model=abc"], "model.d_model=abc: model.d_model takes an int, not 'abc'"),
        (["optimizer.lr=fast"], "optimizer.lr takes a float"),
        (["trainer.progress_bar=maybe"], "takes a bool"),
        (["model.d_model=null"], "cannot be null"),
        (["run_name=.."], "run_name='..' is '..'"),
        (["run_name=a/b"], "holds a path separator"),
    ],
)
def test_mistakes_are_named(args, needle) -> None:
    assert needle in (check_overrides(args, conf=CONF) or "")


@pytest.mark.parametrize(
    "args",
    [
        ["experiment=smoke-cpu", "trainer.max_duration=2ba"],
        ["+variables.anything.below=1", "model.attn_config.rope_hf_config.factor=2"],
        ["model.d_model=${oc.env:D,64}", "optimizer.lr=1e-3,3e-3", "-m", "hydra.sweep.dir=x"],
        ["model=mpt-125m,mpt-350m", "logger=[wandb,console]", "eval.icl_tasks=[]"],
        ["trainer.device_train_microbatch_size=auto", "checkpoint.save_folder=null", "~model.init_config"],
        ["--config-dir", "/elsewhere", "whatever.key=1"],
        ["llmfoundry=run.yaml", "max_duration=10ba"],
        [
            "trainer=_trainer",
            "model=_mpt",
        ],  # schema nodes of the ConfigStore (the translator's command uses them)
    ],
)
def test_what_it_cannot_judge_is_left_to_the_full_check(args) -> None:
    assert check_overrides(args, conf=CONF) is None


def _documented_commands() -> list[list[str]]:
    pages = (
        [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
        if (REPO / "docs").is_dir()
        else [REPO / "README.md"]
    )
    found = []
    for page in pages:
        for line in page.read_text().splitlines():
            match = re.search(r"python train\.py ([^#`|]*)", line)
            if match:
                try:
                    found.append(shlex.split(match.group(1).replace("\\", "")))
                except ValueError:
                    continue
    return found


def test_no_documented_command_is_refused_that_the_full_check_accepts() -> None:
    """It must never refuse what the full check accepts: each `python train.py ...` the docs show that it refuses
    (a deliberate mistake, a user's own experiment file) is refused by Hydra's composition and the schemas too."""
    from hydra import compose, initialize_config_dir

    from foundry.config import register_configs, to_train_config

    commands = _documented_commands()
    assert len(commands) > 20
    refused = [c for c in commands if check_overrides(c, conf=CONF) is not None]
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        for args in refused:
            given = [a for a in args if "=" in a and not a.startswith("-")]
            missing = [a for a in given if a.split("=")[0] in ("experiment", "storage", "debug", "sweep")]
            if missing:  # optional groups: Hydra skips a missing option, `check_group_choices` refuses it
                assert not (CONF / missing[0].replace("=", "/")).with_suffix(".yaml").exists()
                continue
            with pytest.raises(Exception):  # noqa: B017 - any refusal of the full check
                to_train_config(compose("train", overrides=given))


def test_every_indexed_key_passes() -> None:
    import json

    keys = json.loads((CONF / INDEX_NAME).read_text())["keys"]
    assert all(check_overrides([f"{k}=${{x}}"], conf=CONF) is None for k in keys)


def test_train_py_answers_a_typo_without_importing_torch(tmp_path) -> None:
    """The end-to-end path: one error line, exit 2, no torch (`make bench BENCHES=config_error` times it)."""
    code = (
        "import runpy, sys; sys.argv = ['train.py', 'modle=mpt-125m']\n"
        f"try:\n    runpy.run_path({str(REPO / 'train.py')!r}, run_name='__main__')\n"
        "except SystemExit as e:\n    print('EXIT', e.code, 'torch' in sys.modules)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "HYDRA_FULL_ERROR"}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert proc.stdout.strip() == "EXIT 2 False", proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: unknown config key 'modle'") and len(proc.stderr.splitlines()) == 1
    assert time.monotonic() - start < 60  # generous (a loaded machine); ~0.1 s quiet


def test_no_translated_llm_foundry_command_is_refused() -> None:
    """The translator's commands (`--run` passes them to train.py) use ConfigStore nodes such as `trainer=_trainer`."""
    from foundry.compat.llmfoundry import translate_file
    from foundry.compat.llmfoundry.render import overrides

    yamls = sorted((REPO.parent / "shared" / "data" / "llmfoundry_yamls").glob("*/*.yaml"))
    if not yamls:
        pytest.skip("the shared llm-foundry YAMLs are not here")
    refused = {}
    for path in yamls:
        try:
            args = overrides(translate_file(path))
        except ValueError:
            continue  # a YAML the translator refuses: nothing reaches train.py
        if (problem := check_overrides(args, conf=CONF)) is not None:
            refused[path.name] = problem
    assert refused == {}
