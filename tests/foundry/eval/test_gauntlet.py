"""Eval Gauntlet arithmetic on fixed inputs, checked against hand-computed numbers."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from foundry.eval.gauntlet import (
    GauntletConfig,
    compute_gauntlet,
    gauntlet_config,
    gauntlet_markdown,
    gauntlet_metrics,
)


def _cfg(**kw) -> dict:
    cfg = {
        "weighting": "EQUAL",
        "subtract_random_baseline": True,
        "rescale_accuracy": True,
        "categories": [
            {
                "name": "wk",
                "benchmarks": [
                    {"name": "arc_easy", "num_fewshot": 3, "random_baseline": 0.25},
                    {"name": "jeopardy", "num_fewshot": 3, "random_baseline": 0.0},
                ],
            },
            {
                "name": "lu",
                "benchmarks": [{"name": "winograd", "num_fewshot": 3, "random_baseline": 0.5}],
            },
        ],
    }
    cfg.update(kw)
    return cfg


RESULTS = {
    "arc_easy/3-shot": {"InContextLearningMultipleChoiceAccuracy": 0.55, "acc": 0.9},
    "jeopardy/3-shot/history": {"InContextLearningLMAccuracy": 0.2},
    "jeopardy/3-shot/science": {"InContextLearningLMAccuracy": 0.4},
    "icl/metrics/winograd/3-shot": 0.8,
    "unrelated/0-shot": 0.1,  # not in the gauntlet: ignored
}


def test_equal_weighting_rescaled():
    out = compute_gauntlet(RESULTS, _cfg())
    # arc: (0.55-0.25)/0.75 = 0.4 ; jeopardy: mean(0.2, 0.4) = 0.3 (baseline 0) ; winograd: (0.8-0.5)/0.5 = 0.6
    assert out["benchmarks"]["arc_easy/3-shot"]["score"] == pytest.approx(0.4)
    assert out["benchmarks"]["jeopardy/3-shot"]["accuracy"] == pytest.approx(0.3)
    assert out["benchmarks"]["winograd/3-shot"]["score"] == pytest.approx(0.6)
    assert out["categories"] == pytest.approx({"wk": 0.35, "lu": 0.6})
    assert out["averages"] == pytest.approx({"default_average": 0.475})
    assert out["missing"] == []
    assert gauntlet_metrics(out) == pytest.approx(
        {
            "icl/metrics/eval_gauntlet/wk": 0.35,
            "icl/metrics/eval_gauntlet/lu": 0.6,
            "icl/metrics/eval_gauntlet/default_average": 0.475,
        }
    )


def test_no_baseline_subtraction_and_subtract_without_rescale():
    raw = compute_gauntlet(RESULTS, _cfg(subtract_random_baseline=False, rescale_accuracy=False))
    assert raw["categories"] == pytest.approx({"wk": (0.55 + 0.3) / 2, "lu": 0.8})
    sub = compute_gauntlet(RESULTS, _cfg(rescale_accuracy=False))
    assert sub["categories"] == pytest.approx({"wk": (0.30 + 0.3) / 2, "lu": 0.3})


def test_sample_size_weightings():
    results = {
        "arc_easy/3-shot": {"metrics": {"acc": 0.55}, "num_samples": 300},
        # sub-categories: counts add up (100 + 28), accuracies average with equal weight
        "jeopardy/3-shot/a": SimpleNamespace(
            metrics={"InContextLearningLMAccuracy": 0.2}, examples=[0] * 100
        ),
        "jeopardy/3-shot/b": SimpleNamespace(metrics={"InContextLearningLMAccuracy": 0.4}, examples=[0] * 28),
        "winograd/3-shot": {"acc": 0.8, "num_samples": 1},
    }
    out = compute_gauntlet(results, _cfg(weighting="SAMPLE_SZ"))
    assert out["benchmarks"]["jeopardy/3-shot"]["num_samples"] == 128
    assert out["categories"]["wk"] == pytest.approx((0.4 * 300 + 0.3 * 128) / 428)
    log_out = compute_gauntlet(results, _cfg(weighting="log_sample_sz"))
    w_arc, w_jeo = math.log2(300), 7.0
    assert log_out["categories"]["wk"] == pytest.approx((0.4 * w_arc + 0.3 * w_jeo) / (w_arc + w_jeo))
    assert log_out["benchmarks"]["winograd/3-shot"]["weight"] == 1.0  # max(log2(1), 1)


def test_sample_size_weighting_needs_counts():
    with pytest.raises(ValueError, match="num_samples"):
        compute_gauntlet(RESULTS, _cfg(weighting="SAMPLE_SZ"))


def test_named_averages_and_missing_benchmark(caplog):
    results = {k: v for k, v in RESULTS.items() if not k.startswith("jeopardy")}
    cfg = _cfg(averages={"core": ["wk", "lu"], "lu_only": ["lu"]})
    with caplog.at_level(logging.WARNING, logger="foundry.eval.gauntlet"):
        out = compute_gauntlet(results, cfg)
    assert "jeopardy/3-shot" in caplog.text
    assert out["missing"] == ["jeopardy/3-shot"]
    assert out["categories"] == {"wk": None, "lu": pytest.approx(0.6)}
    assert out["averages"] == {"core": None, "lu_only": pytest.approx(0.6)}
    # llm-foundry drops the incomplete category (wk) and averages the rest
    assert out["llmfoundry_averages"] == pytest.approx({"core": 0.6, "lu_only": 0.6})
    assert out["partial"]["categories"] == pytest.approx({"wk": 0.4, "lu": 0.6})
    assert out["partial"]["averages"] == pytest.approx({"core": 0.5, "lu_only": 0.6})
    assert gauntlet_metrics(out) == pytest.approx(
        {"icl/metrics/eval_gauntlet/lu": 0.6, "icl/metrics/eval_gauntlet/lu_only": 0.6}
    )
    table = gauntlet_markdown(out)
    assert "| core | n/a | 0.5000 |" in table and "Missing benchmarks: jeopardy/3-shot" in table


def test_only_llm_foundry_accuracy_metric_used():
    # the *Accuracy* metric wins over lm-eval-style `acc` (0.9) present in the same dict
    out = compute_gauntlet(RESULTS, _cfg())
    assert out["benchmarks"]["arc_easy/3-shot"]["accuracy"] == pytest.approx(0.55)
    with pytest.raises(ValueError, match="no accuracy metric"):
        compute_gauntlet({"winograd/3-shot": {"f1": 0.3}}, _cfg())


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"weighting": "MEDIAN"}, "weighting"),
        ({"subtract_random_baseline": False, "rescale_accuracy": True}, "rescale_accuracy"),
        ({"averages": {"wk": ["wk", "lu"]}}, "also a category name"),
        ({"categories": [{"name": "x", "benchmarks": []}]}, "benchmarks is empty"),
        (
            {
                "categories": [
                    {"name": "x", "benchmarks": [{"name": "b", "num_fewshot": 0, "random_baseline": 1}]}
                ]
            },
            "random_baseline",
        ),
        ({"bogus": 1}, "unknown keys"),
    ],
)
def test_config_validation(override, match):
    with pytest.raises(ValueError, match=match):
        gauntlet_config(_cfg(**override))


def test_average_naming_an_absent_category_is_left_out_with_a_warning(caplog):
    # llm-foundry's own eval_gauntlet.yaml lists `programming` in core_average without defining it;
    # llm-foundry averages over the categories it has, so this warns instead of refusing the file
    with caplog.at_level(logging.WARNING, logger="foundry.eval.gauntlet"):
        cfg = gauntlet_config(_cfg(averages={"core": ["wk", "programming", "lu"]}))
    assert cfg.resolved_averages() == {"core": ["wk", "lu"]}
    assert "no category named ['programming']" in caplog.text


def test_config_from_omegaconf_wrapped():
    from omegaconf import OmegaConf

    cfg = gauntlet_config(OmegaConf.create({"eval_gauntlet": _cfg()}))
    assert isinstance(cfg, GauntletConfig)
    assert cfg.resolved_averages() == {"default_average": ["wk", "lu"]}
    assert cfg.categories[0].benchmarks[0].label == "arc_easy/3-shot"


# ---- the shipped definitions in evals/

EVALS = Path(__file__).resolve().parents[3] / "evals"
DOCUMENTED_ABSENT = {
    "language_understanding/hellaswag.jsonl",
    "world_knowledge/mmlu.jsonl",
    "reading_comprehension/squad.jsonl",
    "reading_comprehension/coqa.jsonl",
    "world_knowledge/triviaqa_sm.jsonl",
    "safety/bbq.jsonl",
    "symbolic_problem_solving/bigbench_elementary_math_qa.jsonl",
}
TASK_TYPES = {"language_modeling", "multiple_choice", "schema", "generation_task_with_answers"}


def _tasks(name: str) -> list[dict]:
    return yaml.safe_load((EVALS / name).read_text())["icl_tasks"]


@pytest.mark.parametrize("name", ["tasks_v0.3.yaml", "tasks_light.yaml"])
def test_task_lists_parse_and_files_exist_or_documented_absent(name, shared_data):
    root = shared_data / "icl"
    readme = (EVALS / "README.md").read_text()
    tasks = _tasks(name)
    assert len({t["label"] for t in tasks}) == len(tasks)
    for task in tasks:
        assert task["icl_task_type"] in TASK_TYPES, task
        assert isinstance(task["num_fewshot"], list) and all(k >= 0 for k in task["num_fewshot"])
        uri = task["dataset_uri"]
        assert not Path(uri).is_absolute(), f"{uri}: dataset_uri must be relative to the data root"
        if uri in DOCUMENTED_ABSENT:
            assert f"`{uri}`" in readme
        else:
            assert (root / uri).is_file(), f"{name}: {uri} neither under {root} nor documented absent"


def test_v03_definitions_consistent():
    tasks = _tasks("tasks_v0.3.yaml")
    assert len(tasks) == 32
    runs = {f"{t['label']}/{k}-shot" for t in tasks for k in t["num_fewshot"]}
    cfg = gauntlet_config(yaml.safe_load((EVALS / "gauntlet_v0.3.yaml").read_text()))
    labels = [b.label for c in cfg.categories for b in c.benchmarks]
    assert len(labels) == 31 and set(labels) <= runs
    assert cfg.resolved_averages()["core_average"] == [c.name for c in cfg.categories]
    # every benchmark at chance accuracy -> every score 0; at 1.0 -> 1
    for acc, want in ((None, 0.0), (1.0, 1.0)):
        results = {
            b.label: (b.random_baseline if acc is None else acc) for c in cfg.categories for b in c.benchmarks
        }
        out = compute_gauntlet(results, cfg)
        assert out["averages"]["core_average"] == pytest.approx(want)
