"""The `eval` config group: schemas validate with messages naming the field; every option composes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

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
    light = load_task_configs(EvalConfig(icl_tasks="evals/tasks_light.yaml"))
    assert light and all(isinstance(t, ICLTaskConfig) for t in light)
    v03 = load_task_configs(EvalConfig(icl_tasks="evals/tasks_v0.3.yaml"))
    assert {"jeopardy", "lambada_openai", "winogrande", "gsm8k", "squad"} <= {t.label for t in v03}
    with pytest.raises(ValueError, match="unknown keys \\['nmae'\\]"):
        load_task_configs(
            EvalConfig(icl_tasks=[{"label": "a", "dataset_uri": "b", "icl_task_type": "schema", "nmae": 1}])
        )
    dup = {"label": "a", "dataset_uri": "b", "icl_task_type": "schema"}
    with pytest.raises(ValueError, match="duplicate labels"):
        load_task_configs(EvalConfig(icl_tasks=[dup, dup]))


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
