"""Parity with lm-evaluation-harness: the same tiny MPT, exported to transformers' MPT format, scored by
lm-eval's `hf` backend through its task pipeline, equals `foundry.eval.evaluate_task` on our own model class
(multiple choice: PIQA; language modelling: LAMBADA; local files): per-example log-likelihoods to 1e-4,
identical `acc` / `acc_norm` / LM accuracy. Our lm-eval adapter (`foundry` model type) on our model class
equals the `hf` backend too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("lm_eval", reason="lm-eval is a dev extra (pip install -e '.[dev]')")

from foundry.eval import EvalConfig, evaluate_task, load_tasks
from foundry.eval.harness import FoundryLM

REPO = Path(__file__).resolve().parents[3]
LIMIT = 12
MAX_SEQ_LEN = 512  # longer than every prompt used: no truncation on either side


@pytest.fixture(scope="module")
def setup(tmp_path_factory, shared_data, neox_tokenizer_path):
    from foundry.models import MPTModelConfig, build_model, materialize_
    from foundry.models.export import export_hf
    from foundry.tokenizers import TokenizerConfig, build_tokenizer

    if not neox_tokenizer_path.is_file():
        pytest.skip(f"tokenizer not found at {neox_tokenizer_path}")
    torch.manual_seed(0)
    cfg = MPTModelConfig(
        d_model=64, n_heads=4, n_layers=2, max_seq_len=MAX_SEQ_LEN, vocab_size=50304, no_bias=True,
        learned_pos_emb=False, norm_type="layernorm", attn_config={"attn_impl": "torch", "alibi": True},
    )  # fmt: skip
    model = materialize_(build_model(cfg, device="meta"), device="cpu").eval()
    tok = build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path)))
    out = tmp_path_factory.mktemp("parity") / "hf"
    assert export_hf(model, out, tokenizer=tok) == "hf_mpt"  # transformers' own MptForCausalLM class
    return model, tok, out, shared_data / "icl"


def _ours(model, tok, data_root, task_cfg):
    cfg = EvalConfig(icl_tasks=[task_cfg], data_root=str(data_root), limit=LIMIT)
    (task,) = load_tasks(cfg)
    return evaluate_task(model, tok, task, device="cpu", batch_size=8)


def _lm_eval(model, task, export_dir, data_root, tmp_path, monkeypatch):
    import lm_eval
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("EVAL_DATA", str(data_root))
    tm = TaskManager(include_path=str(REPO / "evals" / "harness_tasks"), include_defaults=False)
    args = {"pretrained": str(export_dir), "dtype": "float32", "max_length": MAX_SEQ_LEN}
    res = lm_eval.simple_evaluate(
        model=model if isinstance(model, FoundryLM) else "hf",
        model_args=None if isinstance(model, FoundryLM) else args,
        tasks=[task], task_manager=tm, device="cpu", batch_size=8, limit=LIMIT, bootstrap_iters=0,
        log_samples=True,
    )  # fmt: skip
    samples = sorted(res["samples"][task], key=lambda s: s["doc_id"])
    return res["results"][task], samples


PIQA = {
    "label": "piqa",
    "dataset_uri": "commonsense_reasoning/piqa.jsonl",
    "num_fewshot": [0],
    "icl_task_type": "multiple_choice",
    "continuation_delimiter": "\nAnswer: ",
}
LAMBADA = {
    "label": "lambada_openai",
    "dataset_uri": "language_understanding/lambada_openai.jsonl",
    "num_fewshot": [0],
    "icl_task_type": "language_modeling",
}


def test_multiple_choice_parity(setup, tmp_path, monkeypatch):
    model, tok, export_dir, data_root = setup
    ours = _ours(model, tok, data_root, PIQA)
    metrics, samples = _lm_eval("hf", "piqa_local", export_dir, data_root, tmp_path, monkeypatch)
    assert len(ours.examples) == len(samples) == LIMIT
    for ex, s in zip(ours.examples, samples):
        assert ex["index"] == s["doc_id"]
        theirs = [lp for lp, _ in s["filtered_resps"]]
        assert ex["choice_logprobs"] == pytest.approx(theirs, abs=1e-4)
        assert float(ex["correct_acc"]) == s["acc"] and float(ex["correct_acc_norm"]) == s["acc_norm"]
    assert ours.metrics["acc"] == metrics["acc,none"]
    assert ours.metrics["acc_norm"] == metrics["acc_norm,none"]


def test_language_modeling_parity(setup, tmp_path, monkeypatch):
    model, tok, export_dir, data_root = setup
    ours = _ours(model, tok, data_root, LAMBADA)
    metrics, samples = _lm_eval("hf", "lambada_local", export_dir, data_root, tmp_path, monkeypatch)
    assert len(ours.examples) == len(samples) == LIMIT
    for ex, s in zip(ours.examples, samples):
        ((lp, greedy),) = s["filtered_resps"]
        assert ex["logprob"] == pytest.approx(lp, abs=1e-4)
        assert ex["correct"] == greedy
    assert ours.metrics["InContextLearningLMAccuracy"] == metrics["acc,none"]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["piqa_local", "lambada_local"])
def test_adapter_on_our_model_matches_hf_backend(setup, tmp_path, monkeypatch, task):
    model, tok, export_dir, data_root = setup
    lm = FoundryLM(model, tok, device="cpu", batch_size=8)
    ours_metrics, ours = _lm_eval(lm, task, export_dir, data_root, tmp_path, monkeypatch)
    theirs_metrics, theirs = _lm_eval("hf", task, export_dir, data_root, tmp_path, monkeypatch)
    for a, b in zip(ours, theirs):
        assert [lp for lp, _ in a["filtered_resps"]] == pytest.approx(
            [lp for lp, _ in b["filtered_resps"]], abs=1e-4
        )
        assert [g for _, g in a["filtered_resps"]] == [g for _, g in b["filtered_resps"]]
    assert {k: v for k, v in ours_metrics.items() if "acc" in k} == {
        k: v for k, v in theirs_metrics.items() if "acc" in k
    }
