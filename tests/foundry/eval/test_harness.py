"""The lm-eval adapter (`foundry` model type) against lm-eval's own `hf` backend on the same exported MPT."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("lm_eval", reason="lm-eval is a dev extra (pip install -e '.[dev]')")

from foundry.eval.harness import FoundryLM, register
from foundry.eval.harness_load import load_model_and_tokenizer, model_schema

REPO = Path(__file__).resolve().parents[3]
TINY_YAML = """\
defaults:
  - _mpt
d_model: 64
n_heads: 4
n_layers: 2
max_seq_len: 96
vocab_size: 50304
no_bias: true
learned_pos_emb: false
norm_type: layernorm
attn_config: {attn_impl: torch, alibi: true}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, neox_tokenizer_path):
    """(HF export dir, model yaml, weights .pt) of one randomly initialised ~3.3M-parameter MPT."""
    from foundry.models import materialize_
    from foundry.models.build import build_model
    from foundry.models.export import export_hf
    from foundry.tokenizers import TokenizerConfig, build_tokenizer

    if not neox_tokenizer_path.is_file():
        pytest.skip(f"tokenizer not found at {neox_tokenizer_path}")
    root = tmp_path_factory.mktemp("tiny_mpt")
    (root / "model.yaml").write_text(TINY_YAML)
    torch.manual_seed(0)
    model = materialize_(build_model(model_schema(str(root / "model.yaml")), device="meta"), device="cpu")
    tok = build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path)))
    assert export_hf(model.eval(), root / "hf", tokenizer=tok) == "hf_mpt"
    torch.save({"model": model.state_dict()}, root / "weights.pt")
    return SimpleNamespace(
        hf=root / "hf", yaml=root / "model.yaml", weights=root / "weights.pt", tok=neox_tokenizer_path
    )


@pytest.fixture(scope="module")
def both(tiny):
    from lm_eval.models.huggingface import HFLM

    ours = FoundryLM(pretrained=str(tiny.hf), device="cpu", batch_size=3)
    theirs = HFLM(pretrained=str(tiny.hf), dtype="float32", device="cpu", batch_size=3, max_length=96)
    return ours, theirs


def _reqs(*args):
    return [SimpleNamespace(args=a) for a in args]


LL_REQUESTS = _reqs(
    ("The capital of France is", " Paris"),
    ("The capital of France is ", "Paris"),  # trailing space moves to the continuation
    ("", "An empty context is scored after the prefix token."),
    ("Question: what do cats say?\nAnswer:", " meow meow"),
    ("1 2 3 4 5 6 7 8 9", " 10"),
    ("A longer context " * 8, " with a short ending."),
)


def test_loglikelihood_matches_hf_backend(both):
    ours, theirs = both
    a, b = ours.loglikelihood(LL_REQUESTS), theirs.loglikelihood(LL_REQUESTS)
    for (lp_a, g_a), (lp_b, g_b) in zip(a, b):
        assert lp_a == pytest.approx(lp_b, abs=1e-4)
        assert g_a == g_b


def test_loglikelihood_rolling_matches_hf_backend(both):
    ours, theirs = both
    texts = _reqs(("Rolling windows cover the whole text. " * 3,), ("short",))
    assert ours.loglikelihood_rolling(texts) == pytest.approx(theirs.loglikelihood_rolling(texts), abs=1e-4)


def test_rolling_over_several_windows_sums_disjoint_windows(both):
    ours, _ = both
    long = _reqs(("tokens " * 300,))  # ~300 tokens > max_seq_len 96: four windows
    (total,) = ours.loglikelihood_rolling(long)
    ids = ours.tok_encode(long[0].args[0])
    expect, start = 0.0, 0
    while start < len(ids):  # each window: up to 96 predicted tokens, conditioned on the previous ones only
        chunk = ids[start : start + 96]
        ctx = ids[max(0, start + len(chunk) - 97) : start] if start else [ours.prefix_token_id]
        ((lp, _),) = ours._loglikelihood_tokens([(None, ctx, chunk)])
        expect += lp
        start += len(chunk)
    assert total == pytest.approx(expect, abs=1e-3)


def test_generate_until_matches_hf_backend(both):
    ours, theirs = both
    reqs = _reqs(
        ("Question: name a colour.\nAnswer:", {"until": ["\n"], "max_gen_toks": 8, "do_sample": False}),
        ("Once upon a time", {"until": ["."], "max_gen_toks": 6, "do_sample": False}),
        ("Hi", {"until": ["\n"], "max_gen_toks": 8, "do_sample": False}),
    )
    assert ours.generate_until(reqs) == theirs.generate_until(reqs)


def test_long_context_is_left_truncated(both):
    ours, _ = both
    ctx = "word " * 200
    ((lp, _),) = ours.loglikelihood(_reqs((ctx, " end")))
    ids = ours.tok_encode(ctx + " end")
    cont = ids[len(ours.tok_encode(ctx.rstrip())) :]
    ((lp2, _),) = ours._loglikelihood_tokens([(None, ids[: -len(cont)][-96:], cont)])
    assert lp == pytest.approx(lp2, abs=1e-5)


def test_config_plus_weights_equals_export(tiny, both):
    ours, _ = both
    lm = FoundryLM(config=str(tiny.yaml), checkpoint=str(tiny.weights), tokenizer=str(tiny.tok), device="cpu")
    a, b = lm.loglikelihood(LL_REQUESTS[:3]), ours.loglikelihood(LL_REQUESTS[:3])
    assert [x for x, _ in a] == pytest.approx([x for x, _ in b], abs=1e-5)


def _write_foundry_checkpoint(tiny, run_dir: Path) -> Path:
    """A weights-only `full` checkpoint in the trainer's layout: <run>/run.json, <run>/checkpoints/ep0-ba1/."""
    import dataclasses
    import hashlib
    import json

    from foundry.checkpoint import Manifest

    ckpt = run_dir / "checkpoints" / "ep0-ba1"
    ckpt.mkdir(parents=True)
    state = torch.load(tiny.weights, weights_only=True)["model"]
    torch.save(state, ckpt / "model.pt")
    data = (ckpt / "model.pt").read_bytes()
    manifest = Manifest(
        step=1, epoch=0, format="full", world_size=1, weights_only=True,
        files={"model.pt": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}},
        model_config=dataclasses.asdict(model_schema(str(tiny.yaml))),
    )  # fmt: skip
    (ckpt / "manifest.json").write_text(manifest.to_json())
    (run_dir / "checkpoints" / "latest").write_text("ep0-ba1\n")
    run = {"config": {"tokenizer": {"name": str(tiny.tok), "eos_token": "<|endoftext|>"}}}
    (run_dir / "run.json").write_text(json.dumps(run))
    return ckpt


def test_foundry_checkpoint_with_config_and_tokenizer_from_the_run(tiny, both, tmp_path):
    ours, _ = both
    ckpt = _write_foundry_checkpoint(tiny, tmp_path / "run")
    want = [x for x, _ in ours.loglikelihood(LL_REQUESTS[:3])]
    for path in (ckpt, ckpt.parent):  # a checkpoint directory, or the save folder (newest checkpoint)
        lm = FoundryLM(checkpoint=str(path), device="cpu")  # model config: manifest; tokenizer: run.json
        assert [x for x, _ in lm.loglikelihood(LL_REQUESTS[:3])] == pytest.approx(want, abs=1e-5)


def test_continuation_longer_than_max_length_scores_its_last_tokens(both):
    ours, _ = both
    cont = " and" * 120  # 120 tokens + context > 96
    ((lp, _),) = ours.loglikelihood(_reqs(("Start", cont)))
    ids = ours.tok_encode("Start" + cont)
    ((lp2, _),) = ours._loglikelihood_tokens([(None, ids[-97:-96], ids[-96:])])
    assert lp == pytest.approx(lp2, abs=1e-5)


def test_model_argument_errors(tiny):
    with pytest.raises(ValueError, match="name a model"):
        load_model_and_tokenizer()
    with pytest.raises(ValueError, match="not a folder with config.json"):
        load_model_and_tokenizer(pretrained=str(tiny.weights))
    with pytest.raises(ValueError, match="not a yaml file nor a model name"):
        load_model_and_tokenizer(config="no-such-model")
    with pytest.raises(ValueError, match="either pretrained"):
        load_model_and_tokenizer(pretrained=str(tiny.hf), config=str(tiny.yaml))
    assert model_schema("mpt-tiny").d_model == 64  # conf/model names resolve


def _simple_evaluate(model, tiny, shared_data, tmp_path, monkeypatch, tasks, limit):
    import lm_eval
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("EVAL_DATA", str(shared_data / "icl"))
    register()
    register()  # idempotent
    tm = TaskManager(include_path=str(REPO / "evals" / "harness_tasks"), include_defaults=False)
    res = lm_eval.simple_evaluate(
        model=model,  # transformers' MPT cannot tell lm-eval its max_seq_len: pass it
        model_args={"pretrained": str(tiny.hf), "dtype": "float32", "max_length": 96},
        tasks=tasks,
        task_manager=tm,
        device="cpu",
        batch_size=4,
        limit=limit,
        bootstrap_iters=0,
    )
    return res["results"]


def test_simple_evaluate_runs_local_task(tiny, shared_data, tmp_path, monkeypatch):
    out = _simple_evaluate("foundry", tiny, shared_data, tmp_path, monkeypatch, ["piqa_local"], 4)
    assert out["piqa_local"]["sample_len"] == 4
    assert 0.0 <= out["piqa_local"]["acc_norm,none"] <= 1.0


@pytest.mark.slow
def test_simple_evaluate_matches_hf_backend(tiny, shared_data, tmp_path, monkeypatch):
    tasks = ["piqa_local", "lambada_local", "triviaqa_local"]
    ours = _simple_evaluate("foundry", tiny, shared_data, tmp_path, monkeypatch, tasks, 8)
    theirs = _simple_evaluate("hf", tiny, shared_data, tmp_path, monkeypatch, tasks, 8)
    for task, metric in (
        ("piqa_local", "acc,none"),
        ("piqa_local", "acc_norm,none"),
        ("lambada_local", "acc,none"),
        ("triviaqa_local", "exact_match,none"),
    ):
        assert ours[task][metric] == theirs[task][metric]
    assert ours["lambada_local"]["perplexity,none"] == pytest.approx(
        theirs["lambada_local"]["perplexity,none"], rel=1e-4
    )


@pytest.mark.slow
def test_cli_module_runs_lm_eval(tiny, shared_data, tmp_path):
    """`python -m foundry.eval.harness run --model foundry ...` (lm-eval's CLI indexes its built-in tasks: ~30 s)."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "EVAL_DATA": str(shared_data / "icl"),
    }
    cmd = [
        sys.executable, "-m", "foundry.eval.harness", "run", "--model", "foundry",
        "--model_args", f"pretrained={tiny.hf}", "--tasks", "piqa_local",
        "--include_path", str(REPO / "evals" / "harness_tasks"), "--device", "cpu", "--batch_size", "4",
        "--limit", "4", "--output_path", str(tmp_path / "out"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "piqa_local" in proc.stdout and "acc_norm" in proc.stdout
    assert list((tmp_path / "out").rglob("results_*.json"))
