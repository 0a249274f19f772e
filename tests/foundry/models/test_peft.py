"""LoRA through `model.peft_config`: schema validation, only adapters train, adapter-aware init, merge, folders."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from transformers import LlamaConfig, LlamaForCausalLM

from foundry.models import HFCausalLMConfig, MPTModelConfig, build_model, build_model_on, materialize_
from foundry.models.peft import PeftConfig
from foundry.models.peft.folder import ADAPTER_CONFIG, load_adapter, save_adapter
from foundry.models.peft.inject import has_adapters, merge_adapters_

TINY = {"d_model": 32, "n_heads": 2, "n_layers": 2, "max_seq_len": 16, "vocab_size": 64}
LORA = PeftConfig(r=4, lora_alpha=8, lora_dropout=0.0)


def _trainable(model: torch.nn.Module) -> list[str]:
    """Names of the parameters that require grad (after `apply_peft`: the adapters)."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def _train(model: torch.nn.Module, steps: int = 3) -> None:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    torch.manual_seed(1)
    for _ in range(steps):
        ids = torch.randint(0, 64, (2, 12))
        model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()


def test_mpt_only_adapters_train_and_start_equal_to_the_base():
    torch.manual_seed(0)
    base = build_model_on(MPTModelConfig(**TINY), device="cpu")
    torch.manual_seed(0)
    model = build_model_on(MPTModelConfig(**TINY, peft_config=LORA), device="cpu")
    names = _trainable(model)
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert {n.split(".")[-4] for n in names} == {"Wqkv", "out_proj", "up_proj", "down_proj"}
    ids = torch.randint(0, 64, (2, 12))
    torch.testing.assert_close(model(ids).logits, base(ids).logits)  # lora_B = 0: same function at step 0
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    _train(model)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= set(names)
    assert any(".lora_B." in n for n in changed)


def test_meta_build_initialises_adapters_like_peft():
    cfg = MPTModelConfig(**TINY, init_device="meta", peft_config=LORA)
    model = materialize_(build_model(cfg), device="cpu")
    for name, p in model.named_parameters():
        if ".lora_B." in name:
            assert torch.count_nonzero(p) == 0, name
        if ".lora_A." in name:
            assert p.abs().max() > 0 and p.abs().max() <= 1 / p.shape[1] ** 0.5 + 1e-6, name
    torch.manual_seed(0)
    a = materialize_(build_model(cfg), device="cpu")
    torch.manual_seed(0)
    b = materialize_(build_model(cfg), device="cpu")
    for (n, x), (_, y) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(x, y), n


def test_merge_gives_the_same_logits_as_base_plus_adapter():
    torch.manual_seed(0)
    model = build_model_on(MPTModelConfig(**TINY, peft_config=LORA), device="cpu")
    _train(model)
    model.eval()
    ids = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        want = model(ids).logits
        merged = merge_adapters_(model)
        assert not has_adapters(merged)
        assert "transformer.blocks.0.attn.Wqkv.weight" in merged.state_dict()
        torch.testing.assert_close(merged(ids).logits, want, rtol=1e-5, atol=1e-5)


def test_adapter_folder_round_trip(tmp_path):
    torch.manual_seed(0)
    base = build_model_on(MPTModelConfig(**TINY), device="cpu")
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    torch.manual_seed(0)
    tuned = build_model_on(MPTModelConfig(**TINY, peft_config=LORA), device="cpu")  # base as `base`'s
    _train(tuned)
    folder = save_adapter(tuned, LORA, tmp_path / "adapter", base_model="base")
    assert (folder / ADAPTER_CONFIG).is_file()
    fresh = build_model_on(MPTModelConfig(**TINY), device="cpu")
    fresh.load_state_dict(base_state)
    load_adapter(fresh, folder)
    ids = torch.randint(0, 64, (2, 12))
    tuned.eval(), fresh.eval()
    with torch.no_grad():
        torch.testing.assert_close(fresh(ids).logits, tuned(ids).logits)


def test_hf_causal_lm_gets_peft_default_targets(tmp_path):
    torch.manual_seed(0)
    LlamaForCausalLM(
        LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            vocab_size=64,
        )
    ).save_pretrained(tmp_path)
    model = build_model(HFCausalLMConfig(pretrained_model_name_or_path=str(tmp_path), peft_config=LORA))
    names = _trainable(model)
    assert names and {n.split(".")[-4] for n in names} == {"q_proj", "v_proj"}
    _train(model, steps=2)


def test_schema_is_validated_at_compose_time():
    with pytest.raises(ValueError, match=r"model.peft_config.r=0"):
        PeftConfig(r=0)
    with pytest.raises(ValueError, match=r"peft_type"):
        PeftConfig(peft_type="IA3")
    schema = OmegaConf.structured(MPTModelConfig)
    with pytest.raises(Exception, match="lora_rank"):
        OmegaConf.merge(schema, {"peft_config": {"lora_rank": 4}})
    cfg = OmegaConf.to_object(
        OmegaConf.merge(schema, {**TINY, "peft_config": {"r": 2, "target_modules": ["Wqkv"]}})
    )
    assert cfg.peft_config == PeftConfig(r=2, target_modules=["Wqkv"])


def test_unknown_target_names_the_linear_layers():
    with pytest.raises(ValueError, match=r"target_modules.*Wqkv"):
        build_model(MPTModelConfig(**TINY, peft_config=PeftConfig(target_modules=["q_proj"])))
