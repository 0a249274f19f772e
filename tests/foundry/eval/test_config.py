"""The `eval` config group: schemas validate with messages naming the field; every option composes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from foundry.config import register_configs, to_train_config
from foundry.eval.config import EvalConfig, ICLTaskConfig, load_task_configs

CONF = Path(__file__).resolve().parents[3] / "conf"


def test_task_config_normalises_and_validates():
    t = ICLTaskConfig(label="x", dataset_uri="a.jsonl", icl_task_type="question_answering", num_fewshot=3,
                      question_prelimiter="Q: ")  # fmt: skip
    assert (t.icl_task_type, t.num_fewshot, t.prelimiter) == ("generation_task_with_answers", [3], "Q: ")
    with pytest.raises(ValueError, match=r"icl_tasks\['x'\]\.icl_task_type"):
        ICLTaskConfig(label="x", dataset_uri="a", icl_task_type="code_evaluation")
    with pytest.raises(ValueError, match="num_fewshot"):
        ICLTaskConfig(label="x", dataset_uri="a", icl_task_type="schema", num_fewshot=[-1])
    with pytest.raises(ValueError, match="pass_at_k"):
        ICLTaskConfig(label="x", dataset_uri="a", icl_task_type="schema", pass_at_k=5)
    with pytest.raises(ValueError, match="eval.batch_size"):
        EvalConfig(batch_size=0)


def test_task_lists_load_from_yaml_and_reject_unknown_keys():
    light = load_task_configs(EvalConfig(icl_tasks_file="evals/tasks_light.yaml"))
    assert light and all(isinstance(t, ICLTaskConfig) for t in light)
    v03 = load_task_configs(EvalConfig(icl_tasks_file="evals/tasks_v0.3.yaml"))
    assert {"jeopardy", "lambada_openai", "winogrande", "gsm8k", "squad"} <= {t.label for t in v03}
    with pytest.raises(ValueError, match="unknown keys \\['nmae'\\]"):
        EvalConfig(icl_tasks=[{"label": "a", "dataset_uri": "b", "icl_task_type": "schema", "nmae": 1}])
    dup = {"label": "a", "dataset_uri": "b", "icl_task_type": "schema"}
    with pytest.raises(ValueError, match="duplicate labels"):
        load_task_configs(EvalConfig(icl_tasks=[dup, dup]))
    with pytest.raises(ValueError, match="icl_tasks_file"):
        EvalConfig(icl_tasks="evals/tasks_light.yaml")  # a path belongs in icl_tasks_file


def test_task_file_typos_are_rejected_naming_the_file(tmp_path):
    path = tmp_path / "tasks.yaml"
    path.write_text("icl_tasks:\n  - {label: a, dataset_uri: b, icl_task_type: schema, num_fewshott: [1]}\n")
    with pytest.raises(ValueError, match=r"tasks.yaml: icl_tasks\['a'\]: unknown keys \['num_fewshott'\]"):
        load_task_configs(EvalConfig(icl_tasks_file=str(path)))
    inline = [{"label": "c", "dataset_uri": "d", "icl_task_type": "schema"}]
    path.write_text("icl_tasks:\n  - {label: a, dataset_uri: b, icl_task_type: schema}\n")
    both = load_task_configs(EvalConfig(icl_tasks_file=str(path), icl_tasks=inline))
    assert [t.label for t in both] == ["a", "c"]  # the file's tasks first, then the inline ones


def test_typed_task_list_rejects_a_misspelt_key_at_compose(tmp_path):
    """`eval.icl_tasks` is `list[ICLTaskConfig]`: a typo fails when Hydra composes (it used to be `Any`)."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "eval" / "typo.yaml").write_text(
        "defaults:\n  - _eval\nicl_tasks:\n  - label: a\n    dataset_uri: offline://dyck\n"
        "    icl_task_type: language_modeling\n    num_fewshott: [3]\n"
    )
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf)):
        with pytest.raises(ConfigCompositionException) as info:
            compose("train", overrides=["task=eval", "eval=typo"])
        assert "num_fewshott" in str(info.value) + str(info.value.__cause__)
        with pytest.raises(ConfigCompositionException) as info:
            compose("train", overrides=["task=eval", "eval=offline", "eval.icl_tasks.0.num_fewshott=[1]"])
        assert "num_fewshott" in str(info.value) + str(info.value.__cause__)
        obj = to_train_config(
            compose("train", overrides=["task=eval", "eval=offline", "eval.icl_tasks.0.num_fewshot=[0,1]"])
        )
    assert isinstance(obj.eval.icl_tasks[0], ICLTaskConfig) and obj.eval.icl_tasks[0].num_fewshot == [0, 1]


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONF / "eval").glob("*.yaml")))
def test_every_eval_option_composes(option):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        obj = to_train_config(compose("train", overrides=["task=eval", f"eval={option}"]))
    assert isinstance(obj.eval, EvalConfig)
    tasks = load_task_configs(obj.eval)
    assert (len(tasks) == 0) == (option == "none")
    if option == "gauntlet-v0.3":
        assert obj.eval.gauntlet == "evals/gauntlet_v0.3.yaml"
        assert obj.eval.icl_tasks_file == "evals/tasks_v0.3.yaml"
