"""`task=finetune`: composition rules (fast) and in-process runs on the offline instruction set (slow)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from transformers import GPT2Config

from foundry.config import register_configs, to_train_config
from foundry.data.finetune.instruct import write_instruct_dataset
from foundry.data.quickstart import quickstart_corpus, train_bpe_tokenizer
from foundry.errors import ConfigError
from foundry.loggers import read_metrics
from foundry.tasks.finetune import finetune, finetune_config

CONF = Path(__file__).resolve().parents[3] / "conf"


def _compose(*overrides: str):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose("train", overrides=list(overrides))


def _cfg(*overrides: str):
    return to_train_config(_compose(*overrides))


# ---------------------------------------------------------------- composition (fast)
def test_finetune_needs_finetuning_data_and_pretrain_refuses_it():
    with pytest.raises(ConfigError, match=r"task=finetune trains on .* pick data=finetune/<name>"):
        _cfg("task=finetune")
    with pytest.raises(ConfigError, match="add task=finetune"):
        _cfg("data=finetune/instruct-cpu", "tokenizer.name=/x/tokenizer.json")


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("+data.decoder_only_format=true", "llm-foundry finetuning key; always true here"),
        ("+data.split=train", "data.train_split"),
        ("+data.allow_pad_trimming=false", "not supported"),
        ("+load_weights_only=true", "checkpoint.load_weights_only"),
        ("+eval_first=true", "trainer.eval_first"),
    ],
)
def test_llm_foundry_finetuning_keys_fail_at_compose_time_naming_them(override, needle):
    with pytest.raises(ConfigError, match="unknown config key") as info:
        _cfg("experiment=finetune-cpu", override)
    assert needle in str(info.value)


def test_packing_turns_on_sequence_id_masking_and_load_path_loads_weights_only():
    cfg = finetune_config(_cfg("experiment=finetune-cpu", "checkpoint.load_path=/ckpt"))
    assert cfg.data.packing_ratio == "auto" and cfg.model.attn_config.attn_uses_sequence_id
    assert cfg.checkpoint.load_weights_only
    hf = finetune_config(
        _cfg("experiment=finetune-cpu", "model=hf-causal-lm", "model.pretrained_model_name_or_path=/g")
    )
    assert hf.model.attn_uses_sequence_id
    padded = finetune_config(_cfg("experiment=finetune-cpu", "data.packing_ratio=null", "from_scratch=true"))
    assert not padded.model.uses_sequence_id() and not padded.checkpoint.load_weights_only


def test_packing_with_a_model_that_cannot_mask_or_masking_without_packing_is_refused():
    flash = _cfg(
        "experiment=finetune-cpu",
        "model=hf-causal-lm",
        "model.pretrained_model_name_or_path=/g",
        "model.attn_implementation=flash_attention_2",
    )
    with pytest.raises(ConfigError, match="data.packing_ratio.*model.attn_implementation"):
        finetune_config(flash)
    masked = _cfg(
        "experiment=finetune-cpu", "data.packing_ratio=null", "model.attn_config.attn_uses_sequence_id=true"
    )
    with pytest.raises(ConfigError, match=r"model.attn_config.attn_uses_sequence_id=true needs packed rows"):
        finetune_config(masked)


@pytest.mark.parametrize("experiment", ["finetune-cpu", "mpt-7b-dolly-sft"])
def test_finetuning_without_a_starting_point_is_refused_unless_from_scratch(experiment):
    with pytest.raises(ConfigError, match=r"checkpoint.load_path=<pretrained checkpoint>.*from_scratch=true"):
        finetune_config(_cfg(f"experiment={experiment}"))
    assert not finetune_config(_cfg(f"experiment={experiment}", "from_scratch=true")).checkpoint.load_path
    assert finetune_config(
        _cfg(f"experiment={experiment}", "checkpoint.load_path=/ckpt")
    ).checkpoint.load_path
    hf = ["model=hf-causal-lm", "model.pretrained_model_name_or_path=/g"]
    finetune_config(_cfg(f"experiment={experiment}", *hf))  # pretrained HF weights are a starting point
    with pytest.raises(ConfigError, match=r"model.pretrained=true.*from_scratch=true"):
        finetune_config(_cfg(f"experiment={experiment}", *hf, "model.pretrained=false"))


def test_mpt_7b_dolly_sft_is_llm_foundrys_recipe():
    cfg = _cfg("experiment=mpt-7b-dolly-sft", "checkpoint.load_path=/ckpt")
    assert cfg.task == "finetune" and cfg.run_name.startswith("finetune-")  # a new run unless named
    assert cfg.model.d_model == 4096 and cfg.model.n_layers == 32
    d = cfg.data
    assert (d.hf_name, d.train_split, d.eval_split, d.max_seq_len) == (
        "mosaicml/dolly_hhrlhf",
        "train",
        "test",
        2048,
    )
    assert d.packing_ratio is None and d.shuffle
    o, s, t = cfg.optimizer, cfg.scheduler, cfg.trainer
    assert (o.name, o.lr, list(o.betas), o.eps, o.weight_decay) == (
        "decoupled_adamw",
        5e-6,
        [0.9, 0.999],
        1e-8,
        0,
    )
    assert (s.name, s.t_warmup, s.alpha_f) == ("linear_decay_with_warmup", "50ba", 0.0)
    assert (t.max_duration, t.eval_interval, t.eval_first, t.global_train_batch_size) == (
        "2ep",
        "1ep",
        True,
        48,
    )
    assert (t.device_train_microbatch_size, t.device_eval_batch_size, t.precision) == (8, 8, "amp_bf16")
    assert t.grad_clip_norm == 1.0
    p = cfg.parallelism
    assert (p.strategy, p.sharding_strategy, p.mixed_precision, p.activation_checkpointing) == (
        "fsdp",
        "FULL_SHARD",
        "PURE",
        True,
    )


# ---------------------------------------------------------------- runs (slow)
@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict[str, str]:
    """The offline instruction set and a small quick-start-style tokenizer (300 tokens), built once."""
    root = tmp_path_factory.mktemp("ft")
    write_instruct_dataset(root / "instruct", additions=200)
    train_bpe_tokenizer(quickstart_corpus(150_000), vocab_size=300, path=root / "tokenizer.json")
    return {"data": str(root / "instruct"), "tokenizer": str(root / "tokenizer.json")}


def _run_cfg(assets: dict[str, str], *overrides: str):
    return _cfg(
        "experiment=finetune-cpu",
        f"data.hf_name={assets['data']}",
        "data.quickstart_local=null",
        f"tokenizer.name={assets['tokenizer']}",
        "trainer.max_duration=3ba",
        "trainer.global_train_batch_size=4",
        "trainer.device_train_microbatch_size=2",
        "trainer.device_eval_batch_size=8",
        "trainer.eval_interval=0",
        "trainer.eval_first=false",
        "trainer.eval_subset_num_batches=2",
        "trainer.log_interval=1",
        "scheduler.t_warmup=0ba",
        "checkpoint=none",
        "from_scratch=true",  # a random mpt-tiny / GPT-2 unless load_path is given
        *overrides,
    )


def _gpt2(folder: Path) -> str:
    GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=320, n_positions=128, bos_token_id=0, eos_token_id=0
    ).save_pretrained(folder)
    return str(folder)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "packing"),
    [("mpt", "2.0"), ("mpt", "null"), ("gpt2", "2.0"), ("gpt2", "null")],
)
def test_three_steps_padded_and_packed(assets, tmp_path, model, packing):
    extra = [f"data.packing_ratio={packing}"]
    if model == "gpt2":
        extra += ["model=hf-causal-lm", f"model.pretrained_model_name_or_path={_gpt2(tmp_path / 'g')}"]
        extra += ["model.pretrained=false", "data.max_seq_len=128"]
    metrics = finetune(_run_cfg(assets, *extra), run_dir=tmp_path / "run")
    assert torch.isfinite(torch.tensor(metrics["train/loss"])) and metrics["eval/loss"] > 0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    (model_file,) = folder.glob("*/model.pt")
    state = torch.load(model_file, map_location="cpu", weights_only=True)
    return state.get("model", state)


@pytest.mark.slow
def test_load_path_loads_the_weights_only(assets, tmp_path):
    first = tmp_path / "first"
    finetune(_run_cfg(assets, "checkpoint=final", "data.packing_ratio=null"), run_dir=first)
    second = tmp_path / "second"
    cfg = _run_cfg(
        assets,
        "checkpoint=final",
        f"checkpoint.load_path={first / 'checkpoints'}",
        "optimizer.lr=0.0",
        "data.packing_ratio=null",
    )
    finetune(cfg, run_dir=second)  # lr 0: the weights stay those loaded
    run = json.loads((second / "run.json").read_text())
    assert run["derived"]["max_steps"] == 3  # counters start fresh (not at the loaded step 3)
    a, b = _weights(first / "checkpoints"), _weights(second / "checkpoints")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_resume_mid_epoch_with_packing_gives_the_same_steps_and_weights(assets, tmp_path):
    args = ["checkpoint=local", "checkpoint.save_interval=1ba", "checkpoint.save_num_checkpoints_to_keep=-1"]
    args += ["trainer.max_duration=6ba", "data.packing_ratio=2.5", "checkpoint.async_upload=false"]
    straight = tmp_path / "straight"
    cfg = _run_cfg(assets, *args, f"checkpoint.save_folder={straight / 'ck'}")
    finetune(cfg, run_dir=straight)
    full = read_metrics(straight / "metrics.jsonl")
    expected = _weights_of(straight / "ck", 6)
    for step in (4, 5, 6):  # a crash after step 3: its later checkpoints never existed
        shutil.rmtree(next((straight / "ck").glob(f"*-ba{step}")))
    resumed = tmp_path / "resumed"
    shutil.copytree(straight / "ck", resumed / "ck")
    finetune(_run_cfg(assets, *args, f"checkpoint.save_folder={resumed / 'ck'}"), run_dir=resumed)
    rest = [r for r in read_metrics(resumed / "metrics.jsonl") if "train/loss" in r]
    losses = {r["step"]: r["train/loss"] for r in full if "train/loss" in r}
    assert [r["step"] for r in rest] == [4, 5, 6]
    assert [r["train/loss"] for r in rest] == [losses[4], losses[5], losses[6]]
    got = _weights_of(resumed / "ck", 6)
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)


def _weights_of(folder: Path, step: int) -> dict[str, torch.Tensor]:
    (ckpt,) = folder.glob(f"*-ba{step}")
    state = torch.load(ckpt / "model.pt", map_location="cpu", weights_only=True)
    return state.get("model", state)


@pytest.mark.slow
def test_lora_through_task_finetune_changes_only_the_adapters(assets, tmp_path):
    base = tmp_path / "base"
    finetune(_run_cfg(assets, "checkpoint=final", "trainer.max_duration=1ba"), run_dir=base)
    run = tmp_path / "lora"
    cfg = _run_cfg(
        assets,
        "+peft=lora",
        "checkpoint=final",
        f"checkpoint.load_path={base / 'checkpoints'}",
        "optimizer.lr=1e-2",
    )
    finetune(cfg, run_dir=run)
    before, after = _weights(base / "checkpoints"), _weights(run / "checkpoints")
    adapters = [k for k in after if "lora_" in k]
    base_after = {k.replace(".base_layer", ""): v for k, v in after.items() if "lora_" not in k}
    assert adapters and base_after.keys() == before.keys()
    assert all(torch.equal(before[k], base_after[k]) for k in before)  # the frozen base, from load_path
    assert any(not torch.equal(after[k], torch.zeros_like(after[k])) for k in adapters if "lora_B" in k)


@pytest.mark.slow
def test_cpu_recipe_response_loss_falls(tmp_path, monkeypatch):
    monkeypatch.setenv("FOUNDRY_CACHE", str(tmp_path / "cache"))
    cfg = _cfg(
        "experiment=finetune-cpu",
        "trainer.max_duration=1ep",
        "trainer.eval_interval=0",
        "checkpoint=none",
        "from_scratch=true",
    )
    metrics = finetune(cfg, run_dir=tmp_path / "run")
    evals = [r["eval/loss"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "eval/loss" in r]
    assert len(evals) == 2 and evals[1] < evals[0] - 1.0  # eval_first, then after one epoch
    assert metrics["eval/loss"] == evals[1]
