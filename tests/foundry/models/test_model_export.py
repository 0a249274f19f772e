"""Export to transformers' own MptForCausalLM: same logits (fp32 < 1e-5) and greedy generation."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import MptForCausalLM as HFMptForCausalLM

from foundry.models import load_pretrained
from foundry.models.export import export_hf, hf_mpt_incompatibilities, to_hf_mpt_config
from foundry.models.mpt import MPTConfig, MPTForCausalLM

V = 384


def hf_compatible(**kw) -> MPTConfig:
    base = {
        "d_model": 64,
        "n_heads": 4,
        "n_layers": 2,
        "vocab_size": V,
        "max_seq_len": 64,
        "no_bias": True,
        "norm_type": "low_precision_layernorm",
        "attn_config": {"alibi": True},
    }
    base.update(kw)
    return MPTConfig(**base)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"tie_word_embeddings": False},
        {"attn_config": {"alibi": True, "clip_qkv": 0.5, "softmax_scale": 0.2}},
    ],
)
def test_exported_model_matches_transformers_mpt(tmp_path, extra):
    torch.manual_seed(0)
    ours = MPTForCausalLM(hf_compatible(**extra)).eval()
    assert export_hf(ours, tmp_path, fmt="auto") == "hf_mpt"
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "mpt"
    theirs = HFMptForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, V, (2, 24))
    with torch.no_grad():
        diff = (ours(ids).logits - theirs(ids).logits).abs().max().item()
    assert diff < 1e-5
    prompt = ids[:1, :5]
    kw = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(ours.generate(prompt, **kw), theirs.generate(prompt, **kw))


def test_unmappable_options_export_in_foundry_format(tmp_path):
    torch.manual_seed(0)
    cfg = hf_compatible(
        attn_config={"rope": True}, ffn_config={"ffn_type": "mptglu", "ffn_act_fn": {"name": "silu"}}
    )
    problems = hf_mpt_incompatibilities(cfg)
    assert any("alibi" in p for p in problems) and any("mptmlp" in p for p in problems)
    with pytest.raises(ValueError, match="cannot export"):
        to_hf_mpt_config(cfg)
    ours = MPTForCausalLM(cfg).eval()
    with pytest.raises(ValueError, match="cannot export"):
        export_hf(ours, tmp_path / "strict", fmt="hf_mpt")
    assert export_hf(ours, tmp_path / "auto") == "foundry"
    loaded = load_pretrained(tmp_path / "auto").eval()
    ids = torch.randint(0, V, (1, 10))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, ours(ids).logits, atol=0, rtol=0)


def test_learned_pos_and_biases_are_reported():
    problems = hf_mpt_incompatibilities(hf_compatible(no_bias=False, attn_config={}))
    assert any("no_bias" in p for p in problems) and any("learned_pos_emb" in p for p in problems)


def test_export_writes_tokenizer_and_bf16(tmp_path, neox_tokenizer_path):
    from foundry.tokenizers import TokenizerConfig, build_tokenizer

    tok = build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path)))
    ours = MPTForCausalLM(hf_compatible(vocab_size=50304)).eval()
    export_hf(ours, tmp_path, tokenizer=tok, dtype=torch.bfloat16)
    assert (tmp_path / "tokenizer.json").is_file() and (tmp_path / "model.safetensors").is_file()
    theirs = HFMptForCausalLM.from_pretrained(tmp_path, dtype="auto")  # 4.x loads float32 unless asked
    assert theirs.transformer.wte.weight.dtype == torch.bfloat16


def test_export_script_from_folder_and_weights_file(tmp_path, neox_tokenizer_path):
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[3] / "scripts" / "export_hf.py"
    spec = importlib.util.spec_from_file_location("export_hf_script", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    ours = MPTForCausalLM(hf_compatible()).eval()
    ours.save_pretrained(tmp_path / "ckpt")
    mod.main(
        [
            "--src",
            str(tmp_path / "ckpt"),
            "--out",
            str(tmp_path / "a"),
            "--tokenizer",
            str(neox_tokenizer_path),
        ]
    )
    assert (tmp_path / "a" / "tokenizer.json").is_file()
    torch.save({"model": {f"model.{k}": v for k, v in ours.state_dict().items()}}, tmp_path / "w.pt")
    mod.main(
        [
            "--src",
            str(tmp_path / "w.pt"),
            "--config",
            str(tmp_path / "ckpt" / "config.json"),
            "--out",
            str(tmp_path / "b"),
            "--format",
            "hf_mpt",
        ]
    )
    ids = torch.randint(0, V, (1, 9))
    with torch.no_grad():
        for sub in ("a", "b"):
            theirs = HFMptForCausalLM.from_pretrained(tmp_path / sub).eval()
            assert (theirs(ids).logits - ours(ids).logits).abs().max() < 1e-5
