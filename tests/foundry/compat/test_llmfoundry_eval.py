"""llm-foundry's ICL sections and eval-entry YAMLs through the translator (`foundry.compat.llmfoundry.evaluation`).

The real YAMLs are llm-foundry's `scripts/eval/yamls/` (shared/data/llmfoundry_eval_yamls; skipped when absent).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from foundry.compat.llmfoundry import translate_file
from foundry.compat.llmfoundry.render import overrides
from foundry.errors import ConfigError
from foundry.eval.config import load_task_configs
from foundry.eval.gauntlet import gauntlet_config
from tests.foundry.compat.llmfoundry_yaml import MINIMAL, compose_train, write_yaml

REPO = Path(__file__).resolve().parents[3]
EVAL_YAMLS = REPO.parent / "shared" / "data" / "llmfoundry_eval_yamls"
needs_yamls = pytest.mark.skipif(
    not EVAL_YAMLS.is_dir(), reason=f"llm-foundry eval YAMLs not found at {EVAL_YAMLS}"
)

MODEL = """
models:
- model_name: tiny
  model: {name: mpt_causal_lm, d_model: 64, n_heads: 4, n_layers: 2, max_seq_len: 128, vocab_size: 512,
          attn_config: {attn_impl: torch}}
  tokenizer: {name: EleutherAI/gpt-neox-20b}
max_seq_len: 128
device_eval_batch_size: 4
"""
TASK = "{label: copa, dataset_uri: eval/local_data/commonsense_reasoning/copa.jsonl, num_fewshot: [0, 1], icl_task_type: multiple_choice}"
GAUNTLET = "{weighting: EQUAL, categories: [{name: cr, benchmarks: [{name: copa, num_fewshot: 0, random_baseline: 0.5}]}]}"


@needs_yamls
@pytest.mark.parametrize("name", ["test_eval.yaml", "mpt_eval.yaml", "hf_eval.yaml"])
def test_llm_foundry_eval_yamls_become_task_eval(conf, name):
    tr = translate_file(EVAL_YAMLS / name)
    cfg = compose_train(overrides(tr))
    assert cfg.task == "eval"
    tasks = load_task_configs(cfg.eval)
    assert tasks and all(t.dataset_uri.startswith("eval/local_data/") for t in tasks)
    if name == "hf_eval.yaml":  # `eval/yamls/tasks_v0.3.yaml` (relative to llm-foundry's scripts/) found
        assert cfg.eval.icl_tasks_file == str(EVAL_YAMLS / "tasks_v0.3.yaml") and len(tasks) == 32
        assert cfg.eval.gauntlet == str(EVAL_YAMLS / "eval_gauntlet_v0.3.yaml")
        assert (cfg.eval.batch_size, cfg.eval.max_seq_len, cfg.eval.precision) == (4, 1024, "fp32")
        assert cfg.model.pretrained_model_name_or_path == "EleutherAI/gpt-neo-125m"
    if name == "test_eval.yaml":
        assert gauntlet_config(cfg.eval.gauntlet).categories[0].name == "language_understanding_lite"
        assert {n.key for n in tr.notes} >= {"icl_subset_num_batches", "models[0].model_name"}
    if name == "mpt_eval.yaml":
        assert tasks[0].has_categories and tasks[0].continuation_delimiter == "\nAnswer: "
        assert cfg.eval.precision == "amp_fp16" and cfg.seed == 1


def test_a_top_level_model_is_the_one_model_and_load_path_carries_over(conf, tmp_path):
    text = MODEL.replace("models:\n- model_name: tiny\n  model:", "model:").replace(
        "  tokenizer:", "tokenizer:"
    )
    text += f"load_path: /ckpt/ep1.pt\nicl_tasks: [{TASK}]\neval_gauntlet: {GAUNTLET}\nprecision: amp_bf16\n"
    cfg = compose_train(overrides(translate_file(write_yaml(tmp_path, text))))
    assert (cfg.task, cfg.checkpoint.load_path, cfg.eval.precision) == ("eval", "/ckpt/ep1.pt", "amp_bf16")
    assert [t.num_fewshot for t in load_task_configs(cfg.eval)] == [[0, 1]]
    assert gauntlet_config(cfg.eval.gauntlet).categories[0].benchmarks[0].label == "copa/0-shot"


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (f"icl_tasks: [{TASK[:-1]}, num_fewshott: [1]}}]", r"icl_tasks: .*unknown keys \['num_fewshott'\]"),
        (
            f"icl_tasks: [{TASK}]\neval_gauntlet: {{weighting: EQUAL, bogus: 1, categories: []}}",
            r"eval_gauntlet: .*bogus",
        ),
        ("icl_tasks: eval/yamls/nope.yaml", r"icl_tasks: 'eval/yamls/nope.yaml': no such file"),
        (f"icl_tasks: [{TASK}]\nprecision: amp_fp8", r"precision: 'amp_fp8' is not supported by task=eval"),
        ("", r"icl_tasks: missing"),
    ],
)
def test_eval_yaml_mistakes_name_the_key(tmp_path, extra, match):
    with pytest.raises(ConfigError, match=match):
        translate_file(write_yaml(tmp_path, MODEL + extra + "\n"))


def test_several_models_are_refused(tmp_path):
    two = MODEL.replace(
        "max_seq_len: 128\ndevice",
        "- {model: {name: hf_causal_lm, pretrained_model_name_or_path: x}, tokenizer: {name: x}}\nmax_seq_len: 128\ndevice",
    )
    with pytest.raises(ConfigError, match="2 models: a run evaluates one model here"):
        translate_file(write_yaml(tmp_path, two + f"icl_tasks: [{TASK}]\n"))


def test_training_yaml_icl_sections_are_checked_at_translation(conf, tmp_path):
    cfg = compose_train(
        overrides(
            translate_file(
                write_yaml(tmp_path, MINIMAL + f"icl_tasks: [{TASK}]\neval_gauntlet: {GAUNTLET}\n")
            )
        )
    )
    assert cfg.task == "pretrain" and [t.label for t in load_task_configs(cfg.eval)] == ["copa"]
    with pytest.raises(ConfigError, match=r"run.yaml: icl_tasks: .*unknown keys \['shots'\]"):
        translate_file(write_yaml(tmp_path, MINIMAL + f"icl_tasks: [{TASK[:-1]}, shots: 1}}]\n"))
