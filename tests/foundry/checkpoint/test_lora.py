"""LoRA and checkpoints: plain weights into an adapted model, adapters-only saves, autoresume, merged export."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from foundry.checkpoint.adapters import is_adapter_key, match_keys
from foundry.checkpoint.state import load_full
from foundry.models import MPTModelConfig, build_model_on
from foundry.models.peft import PeftConfig
from tests.foundry.checkpoint.runs import (
    REPO,
    assert_bitwise_equal,
    env_for,
    final_state,
    train,
    train_and_kill,
)

TINY = {"d_model": 32, "n_heads": 2, "n_layers": 2, "max_seq_len": 16, "vocab_size": 64}
LORA = PeftConfig(r=4, lora_alpha=8, lora_dropout=0.0)


def test_match_keys_maps_plain_names_and_allows_what_is_by_design():
    model = [
        "a.Wqkv.base_layer.weight",
        "a.Wqkv.lora_A.default.weight",
        "a.Wqkv.lora_B.default.weight",
        "norm.weight",
    ]
    plain = match_keys(model, ["a.Wqkv.weight", "norm.weight"])
    assert plain.source == {"a.Wqkv.base_layer.weight": "a.Wqkv.weight", "norm.weight": "norm.weight"}
    assert (
        plain.skipped == ["a.Wqkv.lora_A.default.weight", "a.Wqkv.lora_B.default.weight"]
        and not plain.missing
    )
    adapters = ["a.Wqkv.lora_A.default.weight", "a.Wqkv.lora_B.default.weight"]
    only = match_keys(model, adapters, adapters_only=True)
    assert set(only.source) == set(adapters) and only.skipped == ["a.Wqkv.base_layer.weight", "norm.weight"]
    torn = match_keys(model, [*adapters[:1], "norm.weight", "extra.weight"])
    assert torn.missing == ["a.Wqkv.base_layer.weight", "a.Wqkv.lora_B.default.weight"]
    assert torn.unexpected == ["extra.weight"]
    assert is_adapter_key("lm_head.modules_to_save.default.weight") and not is_adapter_key(
        "a.base_layer.weight"
    )


def test_a_plain_checkpoint_loads_into_a_lora_model(tmp_path):
    torch.manual_seed(0)
    base = build_model_on(MPTModelConfig(**TINY), device="cpu")
    torch.save(base.state_dict(), tmp_path / "model.pt")
    torch.manual_seed(1)
    model = build_model_on(MPTModelConfig(**TINY, peft_config=LORA), device="cpu")
    load_full(str(tmp_path), model, None, strict=True, allow_pickle=False, rank=0)
    ids = torch.randint(0, 64, (2, 8))
    torch.testing.assert_close(model(ids).logits, base(ids).logits)
    with pytest.raises(RuntimeError, match="not in the model"):
        load_full(
            str(tmp_path),
            build_model_on(MPTModelConfig(**{**TINY, "n_layers": 1}), device="cpu"),
            None,
            strict=True,
            allow_pickle=False,
            rank=0,
        )


LORA_RUN = [
    "+peft=lora",
    "model.peft_config.r=4",
    "optimizer.lr=0.01",
    "trainer.eval_interval=0",
    "checkpoint=local",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A base run, then an uninterrupted adapters-only LoRA run of 6 steps from it."""
    cwd = tmp_path_factory.mktemp("lora")
    env = env_for(tmp_path_factory.mktemp("cache"))
    train(
        ["run_name=base", "trainer.max_duration=4ba", "checkpoint=local", "trainer.eval_interval=0"], cwd, env
    )
    return cwd, env


def _lora_args(name: str, *extra: str) -> list[str]:
    base = "outputs/base/checkpoints"
    return [
        f"run_name={name}",
        "trainer.max_duration=6ba",
        *LORA_RUN,
        f"checkpoint.load_path={base}",
        "checkpoint.load_weights_only=true",
        *extra,
    ]


@pytest.mark.slow
def test_adapters_only_autoresume_equals_an_uninterrupted_run(runs):
    cwd, env = runs
    only = ["checkpoint.save_adapters_only=true", "checkpoint.save_interval=2ba"]
    train(_lora_args("ref", *only), cwd, env)
    ref_model, ref_optim = final_state(cwd / "outputs/ref/checkpoints/ep0-ba6")
    assert ref_model and all(is_adapter_key(k) for k in ref_model)
    killed = train_and_kill(
        _lora_args("resumed", *only), cwd, env, metrics=cwd / "outputs/resumed/metrics.jsonl", at_step=3
    )
    assert killed < 6
    proc = train(_lora_args("resumed", *only), cwd, env)
    assert "autoresume: loaded" in proc.stdout
    model, optim = final_state(cwd / "outputs/resumed/checkpoints/ep0-ba6")
    assert_bitwise_equal(model, ref_model, "model")
    assert_bitwise_equal(optim, ref_optim, "optimizer")
    from foundry.checkpoint.convert import load_model

    with pytest.raises(ValueError, match="adapters only"):
        load_model(str(cwd / "outputs/ref/checkpoints"))
    from foundry.checkpoint import load_weights

    schema = MPTModelConfig(**{**TINY, "vocab_size": 320}, peft_config=LORA)
    with pytest.raises(ValueError, match="adapters only"):  # task=eval / lm-eval would get a random base
        load_weights(build_model_on(schema, device="cpu"), str(cwd / "outputs/ref/checkpoints"))
    loaded, _ = load_model(str(cwd / "outputs/ref/checkpoints"), base=str(cwd / "outputs/base/checkpoints"))
    state = loaded.state_dict()
    assert_bitwise_equal({k: state[k] for k in ref_model}, ref_model, "adapters")
    base_model, _ = final_state(cwd / "outputs/base/checkpoints/ep0-ba4")
    assert torch.equal(
        state["transformer.blocks.0.attn.Wqkv.base_layer.weight"],
        base_model["transformer.blocks.0.attn.Wqkv.weight"],
    )


@pytest.mark.slow
def test_merged_export_and_generate_from_a_lora_checkpoint(runs, tmp_path):
    from foundry.checkpoint.convert import load_model, to_hf
    from foundry.models.build import load_pretrained

    cwd, env = runs
    train(_lora_args("full"), cwd, env)
    ckpt = str(cwd / "outputs/full/checkpoints")
    adapted, manifest = load_model(ckpt)
    assert manifest.model_config["peft_config"]["r"] == 4
    to_hf(ckpt, str(tmp_path / "hf"))
    merged = load_pretrained(tmp_path / "hf").eval()
    assert not any("lora" in k for k in merged.state_dict())
    ids = torch.randint(0, 300, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, adapted(ids).logits, rtol=1e-5, atol=1e-5)
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts/generate.py"),
            "--model",
            ckpt,
            "--prompt",
            "The",
            "--prompt",
            "A",
            "--max-new-tokens",
            "5",
            "--json",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(out.stdout.strip().splitlines()) == 2
