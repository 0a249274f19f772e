"""Parity with llm-foundry's own ICL evaluator (its venv, /tmp/ref/venv-llmfoundry, when installed).

One tiny MPT is exported as a Hugging Face folder (`export_hf`); llm-foundry loads it as `hf_causal_lm` and
runs `build_icl_evaluators` through a Composer `Trainer.eval()` (tests/foundry/eval/llmfoundry_icl.py), we
run `evaluate_task` on our model class, and every evaluator's accuracy must be equal: multiple choice
(piqa, 3-shot), schema (winograd, 3-shot), language modelling split by category (jeopardy, 1-shot) and
plain (lambada, 0-shot); so must llm-foundry's `EvalGauntlet` scores (categories and named averages, our
`llmfoundry_averages`) and ours. Both read the same llm-foundry task dicts and the same jsonl files (a slice
of shared/data/icl, so the few-shot pool is the same). The model is first fitted on half of the jeopardy
answers, so the LM accuracy is neither 0 nor 1 and a prompt or scoring difference changes it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from foundry.eval import EvalConfig, evaluate_task, load_tasks
from foundry.eval.runner import _gauntlet

REF_PYTHON = Path("/tmp/ref/venv-llmfoundry/bin/python")
MAX_SEQ_LEN = 256
BATCH = 8
ROWS = 40
TASKS = [
    {
        "label": "piqa",
        "dataset_uri": "commonsense_reasoning/piqa.jsonl",
        "icl_task_type": "multiple_choice",
        "num_fewshot": [3],
        "continuation_delimiter": "\nAnswer: ",
    },
    {
        "label": "winograd",
        "dataset_uri": "language_understanding/winograd_wsc.jsonl",
        "icl_task_type": "schema",
        "num_fewshot": [3],
    },
    {
        "label": "jeopardy",
        "dataset_uri": "world_knowledge/jeopardy_all.jsonl",
        "icl_task_type": "language_modeling",
        "num_fewshot": [1],
        "continuation_delimiter": "\nAnswer: ",
        "has_categories": True,
    },
    {
        "label": "lambada_openai",
        "dataset_uri": "language_understanding/lambada_openai.jsonl",
        "icl_task_type": "language_modeling",
        "num_fewshot": [0],
    },
]
GAUNTLET = {  # a category with a benchmark that did not run (copa) is dropped by llm-foundry
    "weighting": "EQUAL",
    "subtract_random_baseline": True,
    "rescale_accuracy": True,
    "averages": {"core": ["choice", "lm", "incomplete"], "choice_only": ["choice"]},
    "categories": [
        {"name": "choice", "benchmarks": [
            {"name": "piqa", "num_fewshot": 3, "random_baseline": 0.5},
            {"name": "winograd", "num_fewshot": 3, "random_baseline": 0.5}]},
        {"name": "lm", "benchmarks": [
            {"name": "jeopardy", "num_fewshot": 1, "random_baseline": 0.0},
            {"name": "lambada_openai", "num_fewshot": 0, "random_baseline": 0.0}]},
        {"name": "incomplete", "benchmarks": [
            {"name": "piqa", "num_fewshot": 3, "random_baseline": 0.5},
            {"name": "copa", "num_fewshot": 0, "random_baseline": 0.5}]},
    ],
}  # fmt: skip
ACCURACY = {
    "multiple_choice": "InContextLearningMultipleChoiceAccuracy",
    "schema": "InContextLearningMultipleChoiceAccuracy",
    "language_modeling": "InContextLearningLMAccuracy",
}


def _slice(src: Path, dst: Path) -> list[dict]:
    """Every k-th row of `src` (ROWS of them, several jeopardy categories) written to `dst`."""
    rows = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    step = max(1, len(rows) // ROWS)
    picked = rows[::step][:ROWS]
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("".join(json.dumps(r) + "\n" for r in picked))
    return picked


def _fit(model: torch.nn.Module, tok, texts: list[str], steps: int = 60) -> None:
    """A few optimizer steps on `texts` (the jeopardy answers of half the rows)."""
    ids = [tok(t)["input_ids"][-64:] for t in texts]
    width = max(len(x) for x in ids)
    batch = torch.tensor([x + [tok.eos_token_id] * (width - len(x)) for x in ids])
    labels = torch.tensor([x + [-100] * (width - len(x)) for x in ids])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(batch, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


@pytest.mark.slow
def test_same_accuracies_as_llmfoundry(tmp_path, shared_data, neox_tokenizer_path):
    if not REF_PYTHON.exists():
        pytest.skip(f"llm-foundry venv not found at {REF_PYTHON} (../shared/bench/setup_llmfoundry.sh)")
    if not neox_tokenizer_path.is_file():
        pytest.skip(f"tokenizer not found at {neox_tokenizer_path}")
    from foundry.models import MPTModelConfig, build_model, materialize_
    from foundry.models.export import export_hf
    from foundry.tokenizers import TokenizerConfig, build_tokenizer

    data = tmp_path / "icl"
    picked = {
        t["label"]: _slice(shared_data / "icl" / t["dataset_uri"], data / t["dataset_uri"]) for t in TASKS
    }
    torch.manual_seed(0)
    cfg = MPTModelConfig(
        d_model=64, n_heads=4, n_layers=2, max_seq_len=MAX_SEQ_LEN, vocab_size=50304, no_bias=True,
        learned_pos_emb=False, norm_type="layernorm", attn_config={"attn_impl": "torch", "alibi": True},
    )  # fmt: skip
    model = materialize_(build_model(cfg, device="meta"), device="cpu")
    tok = build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path)))
    rows = picked["jeopardy"][::2]
    _fit(model, tok, [f"{r['context']}\nAnswer: {r['continuation']}" for r in rows])
    hf_dir = tmp_path / "hf"
    assert export_hf(model, hf_dir, tokenizer=tok) == "hf_mpt"

    lf_tasks = [{**t, "dataset_uri": str(data / t["dataset_uri"])} for t in TASKS]
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "model": str(hf_dir),
                "tokenizer": str(neox_tokenizer_path),
                "icl_tasks": lf_tasks,
                "max_seq_len": MAX_SEQ_LEN,
                "batch_size": BATCH,
                "gauntlet": GAUNTLET,
            }
        )  # fmt: skip
    )
    out = tmp_path / "ref.json"
    script = Path(__file__).with_name("llmfoundry_icl.py")
    subprocess.run([str(REF_PYTHON), str(script), str(spec), str(out)], check=True, cwd=tmp_path, timeout=900)
    ref = json.loads(out.read_text())
    theirs = ref["metrics"]

    ours: dict[str, float] = {}
    results = []
    eval_cfg = EvalConfig(icl_tasks=TASKS, data_root=str(data), max_seq_len=MAX_SEQ_LEN, gauntlet=GAUNTLET)
    for task in load_tasks(eval_cfg):
        result = evaluate_task(model, tok, task, device="cpu", batch_size=BATCH)
        results.append(result)
        name = ACCURACY[result.task_type]
        if result.categories:
            ours.update({f"{result.label}/{c}": m[name] for c, m in result.categories.items()})
        else:
            ours[result.label] = result.metrics[name]
    reference = {label: next(v for k, v in m.items() if "Accuracy" in k) for label, m in theirs.items()}
    print(json.dumps({"ours": ours, "llmfoundry": reference}, indent=1))
    assert sorted(ours) == sorted(reference)
    for label, acc in reference.items():
        assert ours[label] == pytest.approx(acc, abs=1e-6), label  # theirs is a float32
    # the Eval Gauntlet: llm-foundry's callback on its metrics == ours on ours
    gauntlet = _gauntlet(eval_cfg, results)
    assert gauntlet is not None
    want = {k.removeprefix("icl/metrics/eval_gauntlet/"): v for k, v in ref["gauntlet"].items()}
    got = {c: v for c, v in gauntlet["categories"].items() if v is not None} | gauntlet["llmfoundry_averages"]
    print(json.dumps({"gauntlet_ours": got, "gauntlet_llmfoundry": want}, indent=1))
    assert got == pytest.approx(want, abs=1e-6)
    jeopardy = [v for k, v in ours.items() if k.startswith("jeopardy/")]
    assert 0 < sum(jeopardy) / len(jeopardy) < 1  # the fitted half is right, the other half mostly not
