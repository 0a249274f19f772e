"""KV-cache decoding equals decoding without the cache, whatever the transformers release calls the cache.

transformers 5.24 hands `generate()`'s cache to `forward(cache=...)` and reads `outputs.cache`; older releases
use `past_key_values`. Every position scheme, LoRA adapters, an export loaded back through the Auto classes
(ours and transformers' own MPT), `foundry.generate` and `scripts/generate.py` are checked token for token,
batched with left padding, and no run may log transformers' deprecation line for the old name.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from foundry.models import MPTModelConfig, build_model_on, load_pretrained
from foundry.models.cache_names import CACHE_NAME, cache_field, output_cache, take_cache
from foundry.models.export import export_hf
from foundry.models.mpt import MPTConfig, MPTForCausalLM
from foundry.models.peft import PeftConfig

V = 128
ROOT = Path(__file__).resolve().parents[3]

SCHEMES = {
    "learned": {},
    "alibi": {"attn_config": {"alibi": True}},
    "none": {"learned_pos_emb": False},
    "rope_dail": {"attn_config": {"rope": True}, "learned_pos_emb": False},
    "rope_hf_no_scaling": {"attn_config": {"rope": True, "rope_impl": "hf"}, "learned_pos_emb": False},
    "rope_hf_linear": {
        "attn_config": {"rope": True, "rope_impl": "hf", "rope_hf_config": {"type": "linear", "factor": 2.0}},
        "learned_pos_emb": False,
    },
    "rope_hf_dynamic": {
        "attn_config": {
            "rope": True,
            "rope_impl": "hf",
            "rope_hf_config": {"type": "dynamic", "factor": 2.0},
        },
        "learned_pos_emb": False,
    },
    "rope_hf_llama3_gqa": {
        "attn_config": {
            "rope": True,
            "rope_impl": "hf",
            "rope_hf_config": {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 16},
            "attn_type": "grouped_query_attention",
            "kv_n_heads": 2,
        },
        "learned_pos_emb": False,
    },
    "alibi_window_mqa": {
        "attn_config": {"alibi": True, "sliding_window_size": 4, "attn_type": "multiquery_attention"}
    },
}


def _tiny(**kw) -> MPTConfig:
    base = {"d_model": 64, "n_heads": 4, "n_layers": 2, "vocab_size": V, "max_seq_len": 48}
    base.update(kw)
    return MPTConfig(**base)


def _prompts() -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts, the shorter left-padded (pad id 0), and their attention mask."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, V, (2, 9), generator=g)
    mask = torch.ones_like(ids)
    ids[1, :4], mask[1, :4] = 0, 0
    return ids, mask


def _greedy(model: torch.nn.Module, *, use_cache: bool, n: int = 12) -> torch.Tensor:
    ids, mask = _prompts()
    with torch.no_grad():
        return model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            use_cache=use_cache,
            pad_token_id=0,
        )


def _argmax_loop(model: torch.nn.Module, n: int = 12) -> torch.Tensor:
    """Greedy decoding by hand: every step recomputes the whole (left-padded) prefix, no cache at all."""
    ids, mask = _prompts()
    with torch.no_grad():
        for _ in range(n):
            nxt = model(ids, attention_mask=mask, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            ids, mask = torch.cat([ids, nxt], 1), torch.cat([mask, torch.ones_like(nxt)], 1)
    return ids


@pytest.fixture()
def transformers_log() -> Iterator[list[str]]:
    """Every transformers log line while the test runs (`warning_once`'s memory cleared first)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    hf_logging.get_logger("transformers").warning_once.cache_clear()  # type: ignore[attr-defined]
    handler = Keep(level=logging.DEBUG)
    root = logging.getLogger(
        "transformers"
    )  # not hf_logging.add/remove_handler: 4.56's remove asserts wrongly
    root.addHandler(handler)
    try:
        yield lines
    finally:
        root.removeHandler(handler)


def _no_deprecation(lines: list[str]) -> None:
    assert not [line for line in lines if "deprecated" in line], lines


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_cached_greedy_equals_uncached_for_every_position_scheme(scheme, transformers_log):
    torch.manual_seed(0)
    model = MPTForCausalLM(_tiny(**SCHEMES[scheme])).eval()
    cached = _greedy(model, use_cache=True)
    assert torch.equal(cached, _greedy(model, use_cache=False))
    assert torch.equal(cached, _argmax_loop(model))
    _no_deprecation(transformers_log)


def test_forward_takes_the_cache_under_either_name_and_returns_it_under_the_installed_one(transformers_log):
    torch.manual_seed(0)
    model = MPTForCausalLM(_tiny(attn_config={"alibi": True})).eval()
    ids = torch.randint(0, V, (1, 10))
    with torch.no_grad():
        full = model(ids).logits
        out = model(ids[:, :6], use_cache=True)
        cache = output_cache(out)
        assert cache is not None and cache.get_seq_length() == 6
        assert set(out.keys()) >= {"logits", CACHE_NAME}
        new = model(ids[:, 6:8], past_key_values=cache, use_cache=True).logits  # the pre-5.24 name
        last = model(ids[:, 8:], **cache_field(cache), use_cache=True).logits  # the installed name
    torch.testing.assert_close(torch.cat([out.logits, new, last], 1), full, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="not both"):
        take_cache(cache, cache)
    _no_deprecation(transformers_log)


def test_lora_adapters_decode_the_same_with_and_without_the_cache(transformers_log):
    torch.manual_seed(0)
    cfg = MPTModelConfig(
        d_model=32,
        n_heads=2,
        n_layers=2,
        max_seq_len=48,
        vocab_size=V,
        attn_config={"rope": True},
        learned_pos_emb=False,
        peft_config=PeftConfig(r=2, lora_alpha=4, lora_dropout=0.0),
    )
    model = build_model_on(cfg, device="cpu").eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.5)
    cached = _greedy(model, use_cache=True)
    assert torch.equal(cached, _greedy(model, use_cache=False))
    assert torch.equal(cached, _argmax_loop(model))
    _no_deprecation(transformers_log)


@pytest.mark.parametrize("fmt,scheme", [("foundry", "rope_hf_llama3_gqa"), ("hf_mpt", "alibi")])
def test_an_export_loaded_through_the_auto_classes_decodes_the_same(fmt, scheme, tmp_path, transformers_log):
    torch.manual_seed(0)
    extra = {"no_bias": True} if fmt == "hf_mpt" else {}  # transformers' MPT has no biases
    model = MPTForCausalLM(_tiny(**SCHEMES[scheme], **extra)).eval()
    expected = _greedy(model, use_cache=False)
    assert export_hf(model, tmp_path, fmt=fmt) == fmt
    loaded = load_pretrained(tmp_path).eval()
    if fmt == "hf_mpt":  # transformers' own MptForCausalLM, no registration needed
        assert type(loaded).__name__ == "MptForCausalLM"
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert torch.equal(_greedy(loaded, use_cache=True), expected)
    assert torch.equal(_greedy(loaded, use_cache=False), expected)
    if fmt == "foundry":  # transformers' own MPT logs its own notices; ours must log none
        _no_deprecation(transformers_log)


@pytest.mark.slow
def test_generate_script_prints_the_same_completion_with_and_without_the_cache(tmp_path, neox_tokenizer_path):
    from foundry.tokenizers import TokenizerConfig, build_tokenizer

    torch.manual_seed(0)
    model = build_model_on(
        MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=64, vocab_size=50304), device="cpu"
    )
    model.save_pretrained(tmp_path / "m")
    build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path))).save_pretrained(tmp_path / "m")
    outputs = []
    for extra in ([], ["--no-cache"]):
        run = subprocess.run(
            [sys.executable, str(ROOT / "scripts/generate.py"), "--model", str(tmp_path / "m")]
            + ["--prompt", "### Question:\nWhat is", "--prompt", "Hi", "--max-new-tokens", "16", *extra],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        assert "deprecated" not in run.stderr, run.stderr
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1] and outputs[0].strip()
