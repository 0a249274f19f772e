"""`run_icl_eval` end to end on tiny models: metric keys, result files, categories, the gauntlet, an HF
causal LM, and the training callback."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from foundry.eval import EvalConfig, ICLTaskConfig, run_icl_eval
from foundry.eval.callback import ICLEvalCallback, icl_callbacks
from foundry.eval.synthetic import OFFLINE_TASKS

KINDS = {
    "arithmetic": "generation_task_with_answers",
    "arithmetic_mc": "multiple_choice",
    "repeat_copy": "language_modeling",
    "dyck": "language_modeling",
    "compare_schema": "schema",
}


def _offline_cfg(limit: int = 8, **kw) -> EvalConfig:
    tasks = [
        {"label": n, "dataset_uri": f"offline://{n}", "icl_task_type": KINDS[n], "num_fewshot": [0, 2]}
        for n in OFFLINE_TASKS
    ]
    return EvalConfig(icl_tasks=tasks, limit=limit, batch_size=8, **kw)


def test_offline_tasks_write_results_tables_and_examples(icl_model, icl_tokenizer, tmp_path):
    flat = run_icl_eval(
        _offline_cfg(), model=icl_model, tokenizer=icl_tokenizer, device="cpu", output_dir=tmp_path
    )
    assert flat["icl/arithmetic_mc/2-shot/acc"] >= 0 and "icl/compare_schema/0-shot/acc_norm" in flat
    assert "icl/repeat_copy/2-shot/InContextLearningLMAccuracy" in flat
    assert "icl/arithmetic/0-shot/InContextLearningGenerationExactMatchAccuracy" in flat
    assert len(flat) == 2 * (4 + 4 + 2 + 2 + 1)  # MC/schema: 3 accuracies + ECE; LM: accuracy + ECE
    doc = json.loads((tmp_path / "icl_results.json").read_text())
    assert doc["metrics"] == flat and doc["tasks"]["dyck/2-shot"]["num_samples"] == 8
    assert "| arithmetic_mc/2-shot | multiple_choice | 8 |" in (tmp_path / "icl_results.md").read_text()
    lines = (tmp_path / "icl_examples" / "arithmetic_mc_2shot.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    assert len(lines) == 8 and len(rec["choice_logprobs"]) == 4 and rec["prompt"].endswith("=")
    gen = json.loads((tmp_path / "icl_examples" / "arithmetic_0shot.jsonl").read_text().splitlines()[0])
    assert {"output", "answer", "labels", "correct"} <= set(gen)


def test_categories_and_gauntlet(icl_model, icl_tokenizer, tmp_path):
    pytest.importorskip("foundry.eval.gauntlet")
    rows = [
        {"context": f"Repeat: w{i}\nOutput:", "continuation": f"w{i}", "category": "ab"[i % 2]}
        for i in range(6)
    ]
    (tmp_path / "cat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = EvalConfig(
        icl_tasks=[
            {
                "label": "cat",
                "dataset_uri": "cat.jsonl",
                "icl_task_type": "language_modeling",
                "has_categories": True,
            },
            {
                "label": "mc",
                "dataset_uri": "offline://arithmetic_mc",
                "icl_task_type": "multiple_choice",
                "limit": 8,
            },
        ],
        data_root=str(tmp_path),
        gauntlet={
            "categories": [
                {"name": "copying", "benchmarks": [{"name": "cat", "num_fewshot": 0}]},
                {"name": "math", "benchmarks": [{"name": "mc", "num_fewshot": 0, "random_baseline": 0.25}]},
            ]
        },
    )
    flat = run_icl_eval(
        cfg, model=icl_model, tokenizer=icl_tokenizer, device="cpu", output_dir=tmp_path / "out"
    )
    assert {
        "icl/cat/0-shot/a/InContextLearningLMAccuracy",
        "icl/cat/0-shot/b/InContextLearningLMAccuracy",
    } <= set(flat)
    mc = flat["icl/mc/0-shot/InContextLearningMultipleChoiceAccuracy"]
    assert flat["icl/metrics/eval_gauntlet/math"] == pytest.approx((mc - 0.25) / 0.75)
    assert "default_average" in json.dumps(
        json.loads((tmp_path / "out" / "icl_results.json").read_text())["gauntlet"]
    )
    assert "Eval Gauntlet" in (tmp_path / "out" / "icl_results.md").read_text()


def test_hf_causal_lm_evaluates(icl_tokenizer, tmp_path):
    transformers = pytest.importorskip("transformers")
    from foundry.models import HFCausalLMConfig, build_model

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=320, n_positions=256, n_embd=32, n_layer=2, n_head=4)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "gpt2")
    model = build_model(HFCausalLMConfig(pretrained_model_name_or_path=str(tmp_path / "gpt2")))
    fast = run_icl_eval(_offline_cfg(limit=4), model=model, tokenizer=icl_tokenizer, device="cpu")
    ref = run_icl_eval(
        _offline_cfg(limit=4, pad_to_max_seq_len=True), model=model, tokenizer=icl_tokenizer, device="cpu"
    )
    assert fast == ref and all(math.isfinite(v) for v in fast.values())


def test_callback_returns_metrics_and_writes_per_step(icl_model, icl_tokenizer, tmp_path):
    cfg = EvalConfig(
        icl_tasks=[
            {"label": "mc", "dataset_uri": "offline://arithmetic_mc", "icl_task_type": "multiple_choice"}
        ],
        limit=4,
    )
    assert icl_callbacks(EvalConfig(), tokenizer=icl_tokenizer, run_dir=tmp_path) == []
    (cb,) = icl_callbacks(cfg, tokenizer=icl_tokenizer, run_dir=tmp_path)
    assert isinstance(cb, ICLEvalCallback)
    trainer = SimpleNamespace(model=icl_model, device=torch.device("cpu"), state=SimpleNamespace(step=7))
    icl_model.train()
    metrics = cb.on_eval_end(trainer, eval_seconds=0.0)
    assert icl_model.training  # restored
    assert "icl/mc/0-shot/acc" in metrics and metrics["icl/seconds"] > 0
    assert (tmp_path / "icl" / "step_7" / "icl_results.json").is_file()


def test_overlong_rows_are_skipped_and_counted_never_aborting(icl_model, icl_tokenizer, tmp_path):
    """Item 2: a row whose continuation leaves no context token within max_seq_len used to raise
    (`raise eval.max_seq_len`) and lose the tasks already evaluated; now it is skipped and counted."""
    long = " ".join(["red blue green cat dog"] * 12)
    rows = [
        {"query": f"{i} + 1 =", "choices": [str(i + 1), long if i == 2 else "7"], "gold": 0} for i in range(6)
    ]
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = EvalConfig(
        icl_tasks=[
            {"label": "copy", "dataset_uri": "offline://repeat_copy", "icl_task_type": "language_modeling"},
            {"label": "mc", "dataset_uri": "mc.jsonl", "icl_task_type": "multiple_choice", "num_fewshot": [0]},
        ],
        data_root=str(tmp_path), limit=6, max_seq_len=24, batch_size=4,
    )  # fmt: skip
    assert len(icl_tokenizer(" " + long, add_special_tokens=False)["input_ids"]) >= 24
    flat = run_icl_eval(
        cfg, model=icl_model, tokenizer=icl_tokenizer, device="cpu", output_dir=tmp_path / "o"
    )
    assert "icl/copy/0-shot/InContextLearningLMAccuracy" in flat and "icl/copy/0-shot/skipped" not in flat
    assert flat["icl/mc/0-shot/skipped"] == 1 and not math.isnan(flat["icl/mc/0-shot/acc"])
    doc = json.loads((tmp_path / "o" / "icl_results.json").read_text())
    assert doc["tasks"]["mc/0-shot"]["skipped_rows"] == 1 and doc["tasks"]["mc/0-shot"]["num_samples"] == 5
    assert "skipped=1" in (tmp_path / "o" / "icl_results.md").read_text()


@torch.no_grad()
def test_three_shot_task_end_to_end(icl_model, icl_tokenizer):
    """A 3-shot multiple-choice task: prompts from llm-foundry's shot rule (order kept), scores from a naive
    forward per choice, accuracy from those scores."""
    import random

    from foundry.eval.prompts import needs_prefix_space
    from foundry.eval.runner import ICLTask, evaluate_task
    from foundry.eval.synthetic import generate_offline
    from tests.foundry.eval.test_prompts import _llmfoundry_shots

    rows = generate_offline("arithmetic_mc", n=10)
    cfg = ICLTaskConfig(label="a", dataset_uri="offline://arithmetic_mc", icl_task_type="multiple_choice",
                        continuation_delimiter=" Answer: ", fewshot_random_seed=1234)  # fmt: skip
    res = evaluate_task(icl_model, icl_tokenizer, ICLTask(cfg, 3, rows), device="cpu", batch_size=16)
    rng = random.Random(1234)
    space = " " if needs_prefix_space(icl_tokenizer) else ""  # llm-foundry's rule for the continuation
    correct = []
    for i, rec in enumerate(res.examples):
        shots = _llmfoundry_shots(rng, 10, 3, i)
        text = "\n".join(f"{rows[j]['query']} Answer: {rows[j]['choices'][rows[j]['gold']]}" for j in shots)
        assert rec["prompt"] == f"{text}\n{rows[i]['query']} Answer:"
        pre = icl_tokenizer(text)["input_ids"]
        ctx = pre + icl_tokenizer(f"\n{rows[i]['query']} Answer:", add_special_tokens=False)["input_ids"]
        lps = []
        for choice in rows[i]["choices"]:
            cont = icl_tokenizer(f"{space}{choice}", add_special_tokens=False)["input_ids"]
            logp = icl_model(input_ids=torch.tensor([ctx + cont])).logits[0].float().log_softmax(-1)
            lps.append(sum(float(logp[len(ctx) - 1 + k, t]) for k, t in enumerate(cont)))
        assert rec["choice_logprobs"] == pytest.approx(lps, abs=1e-4)
        correct.append(rec["correct"])
    assert res.metrics["InContextLearningMultipleChoiceAccuracy"] == sum(correct) / 10
