"""`build_model_on`, the one way to get a model on a device, and where the model schemas and their registry live."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from foundry.models import (
    MODEL_SCHEMAS,
    AttnConfig,
    HFCausalLMConfig,
    ModelConfig,
    MPTModelConfig,
    build_model,
    build_model_on,
    materialize_,
    model_schema_from_dict,
    register_model_configs,
)

TINY = {"d_model": 32, "n_heads": 2, "n_layers": 2, "max_seq_len": 16, "vocab_size": 64}


def _assert_same(a: torch.nn.Module, b: torch.nn.Module) -> None:
    """Same parameters and buffers (non-persistent ones included), bit for bit."""
    for (name, x), (other, y) in zip(
        [*a.named_parameters(), *a.named_buffers()], [*b.named_parameters(), *b.named_buffers()], strict=True
    ):
        assert name == other and x.device == y.device and torch.equal(x, y), name


@pytest.mark.parametrize("init_device", ["cpu", "meta"])
def test_same_weights_as_the_hand_written_sequence(init_device):
    cfg = MPTModelConfig(**TINY, init_device=init_device)
    torch.manual_seed(0)
    by_hand = build_model(cfg)
    if init_device == "meta":
        by_hand = materialize_(by_hand, device="cpu")
    torch.manual_seed(0)
    _assert_same(build_model_on(cfg, device="cpu"), by_hand)


def test_init_device_override_matches_meta_then_materialize():
    cfg = MPTModelConfig(**TINY)  # the schema says cpu; the lm-eval adapter and ICL benchmark create on meta
    torch.manual_seed(0)
    by_hand = materialize_(build_model(cfg, device="meta"), device="cpu")
    torch.manual_seed(0)
    _assert_same(build_model_on(cfg, device="cpu", init_device="meta"), by_hand)


def test_defer_init_keeps_meta_for_fsdp():
    model = build_model_on(MPTModelConfig(**TINY, init_device="meta"), device="cpu", defer_init=True)
    assert all(p.is_meta for p in model.parameters())


@pytest.mark.parametrize("attn", [AttnConfig(), AttnConfig(alibi=True), AttnConfig(rope=True)])
def test_state_dict_is_assigned_and_buffers_rebuilt(attn):
    cfg = MPTModelConfig(**TINY, attn_config=attn)
    source = build_model(cfg)
    weights = {k: v.clone() for k, v in source.state_dict().items()}
    model = build_model_on(cfg, device="cpu", state_dict=weights)
    _assert_same(model, source)
    assert model.get_input_embeddings().weight.data_ptr() == weights["transformer.wte.weight"].data_ptr()


def test_state_dict_must_match():
    weights = build_model(MPTModelConfig(**TINY)).state_dict()
    with pytest.raises(RuntimeError, match="n_layers|Unexpected key|Missing key"):
        build_model_on(MPTModelConfig(**{**TINY, "n_layers": 3}), device="cpu", state_dict=weights)


def test_defer_init_with_state_dict_is_refused():
    with pytest.raises(ValueError, match="defer_init"):
        build_model_on(MPTModelConfig(**TINY), device="cpu", defer_init=True, state_dict={})


def test_tokenizer_larger_than_vocab_names_the_padded_size():
    tokenizer = type("Tok", (), {"__len__": lambda self: 65})()
    with pytest.raises(ValueError, match=r"65 tokens but model.vocab_size=64.*e\.g\. 128"):
        build_model_on(MPTModelConfig(**TINY), device="cpu", tokenizer=tokenizer)
    fits = type("Tok", (), {"__len__": lambda self: 64})()
    assert build_model_on(MPTModelConfig(**TINY), device="cpu", tokenizer=fits).config.vocab_size == 64


def test_model_schemas_and_their_registry():
    assert ModelConfig.__module__ == MPTModelConfig.__module__ == "foundry.models.config"
    assert MODEL_SCHEMAS == {"_mpt": MPTModelConfig, "_hf_causal_lm": HFCausalLMConfig}
    assert all(issubclass(schema, ModelConfig) for schema in MODEL_SCHEMAS.values())
    stored: dict[str, type] = {}
    register_model_configs(
        SimpleNamespace(store=lambda group, name, node: stored.update({f"{group}/{name}": node}))
    )
    assert stored == {"model/_mpt": MPTModelConfig, "model/_hf_causal_lm": HFCausalLMConfig}
    assert isinstance(model_schema_from_dict(dict(TINY)), MPTModelConfig)


def test_exported_config_records_no_module_path(tmp_path):
    """Saved folders name the model type and class, not `foundry.models.mpt.hf_config`: renames keep them loading."""
    build_model_on(MPTModelConfig(**TINY), device="cpu").save_pretrained(tmp_path)
    text = (tmp_path / "config.json").read_text()
    assert json.loads(text)["model_type"] == "foundry_mpt" and "auto_map" not in text
    assert "foundry.models" not in text
