"""hf_causal_lm: any transformers causal LM from a local folder, pretrained or fresh, offline."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from foundry.models import HFCausalLMConfig, build_model


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-gpt2")
    torch.manual_seed(0)
    GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=64)
    ).save_pretrained(path)
    return path


def test_pretrained_loads_weights(gpt2_dir):
    model = build_model(HFCausalLMConfig(pretrained_model_name_or_path=str(gpt2_dir)))
    ref = GPT2LMHeadModel.from_pretrained(gpt2_dir)
    ids = torch.randint(0, 128, (1, 8))
    torch.testing.assert_close(model(ids).logits, ref(ids).logits)
    assert model(ids, labels=ids).loss.isfinite()


def test_fresh_architecture_with_overrides_and_vocab_resize(gpt2_dir):
    cfg = HFCausalLMConfig(
        pretrained_model_name_or_path=str(gpt2_dir), pretrained=False, config_overrides={"n_layer": 1}
    )
    model = build_model(cfg, vocab_size=192)
    assert len(model.transformer.h) == 1 and model.get_input_embeddings().weight.shape[0] == 192


def test_missing_model_and_bad_override_are_clear(gpt2_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="pretrained_model_name_or_path"):
        build_model(HFCausalLMConfig(pretrained_model_name_or_path="nobody/not-cached"))
    with pytest.raises(ValueError, match="config_overrides.n_layerz"):
        build_model(
            HFCausalLMConfig(pretrained_model_name_or_path=str(gpt2_dir), config_overrides={"n_layerz": 1})
        )
