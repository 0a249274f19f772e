"""`foundry.generate`: greedy equals a naive no-cache argmax loop, batches equal one by one, stop strings cut,
chat rendering, loading from an HF folder, base + adapter and a trainer checkpoint."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from foundry.generate import (
    SamplingConfig,
    cut_at_stop,
    generate,
    load_for_generation,
    read_prompts,
    render_chat,
)
from foundry.models import MPTModelConfig, build_model_on
from foundry.tokenizers import TokenizerConfig, build_tokenizer

PROMPTS = ["The quick brown fox", "Once", "In a galaxy far, far away there was"]


@pytest.fixture(scope="module")
def tokenizer(neox_tokenizer_path):
    return build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path)))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=64, vocab_size=50304)
    return build_model_on(cfg, device="cpu").eval()


def _naive_greedy(model, tokenizer, prompt: str, n: int) -> str:
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    new: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(ids, use_cache=False).logits[0, -1].argmax())
            if nxt == tokenizer.eos_token_id:
                break
            new.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return tokenizer.decode(new, skip_special_tokens=True)


def test_greedy_equals_a_naive_argmax_loop_and_batches_equal_one_by_one(model, tokenizer):
    cfg = SamplingConfig(max_new_tokens=10, batch_size=3)
    batched = generate(model, tokenizer, PROMPTS, cfg)
    one_by_one = [generate(model, tokenizer, [p], SamplingConfig(max_new_tokens=10))[0] for p in PROMPTS]
    assert batched == one_by_one
    assert batched == [_naive_greedy(model, tokenizer, p, 10) for p in PROMPTS]
    assert tokenizer.padding_side == "right"  # restored


def test_stop_strings_cut_and_sampling_is_seeded(model, tokenizer):
    full = generate(model, tokenizer, PROMPTS[:1], SamplingConfig(max_new_tokens=10))[0]
    stop = full[3:5]
    cut = generate(model, tokenizer, PROMPTS[:1], SamplingConfig(max_new_tokens=10, stop=[stop]))[0]
    assert cut == full[: full.find(stop)] and stop not in cut
    sampled = SamplingConfig(max_new_tokens=6, temperature=0.8, top_k=50, top_p=0.9, seed=3)
    assert generate(model, tokenizer, PROMPTS, sampled) == generate(model, tokenizer, PROMPTS, sampled)


@given(st.text(max_size=30), st.lists(st.text(min_size=1, max_size=3), max_size=3))
def test_cut_at_stop_is_the_earliest_stop(text, stops):
    cut = cut_at_stop(text, stops)
    assert text.startswith(cut) and not any(s in cut for s in stops)
    if cut != text:
        assert any(text[len(cut) :].startswith(s) for s in stops)


def test_chat_falls_back_to_chatml_and_files_are_read(tokenizer, tmp_path):
    text = render_chat(
        tokenizer, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    )
    assert (
        text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        render_chat(tokenizer, [{"content": "no role"}])
    rows = tmp_path / "p.jsonl"
    rows.write_text(
        json.dumps({"prompt": "a"}) + "\n" + json.dumps({"messages": [{"role": "user", "content": "b"}]})
    )
    assert read_prompts(rows) == ["a", [{"role": "user", "content": "b"}]]
    rows.write_text(json.dumps({"text": "a"}))
    with pytest.raises(ValueError, match=r"p.jsonl:1"):
        read_prompts(rows)
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0)


def test_loads_an_hf_folder_and_base_plus_adapter(model, tokenizer, tmp_path):
    from foundry.models.peft import PeftConfig
    from foundry.models.peft.folder import save_adapter

    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    net, tok = load_for_generation(str(tmp_path / "base"))
    cfg = SamplingConfig(max_new_tokens=6)
    assert generate(net, tok, PROMPTS, cfg) == generate(model, tokenizer, PROMPTS, cfg)
    lora = PeftConfig(r=2, lora_alpha=4, lora_dropout=0.0)
    torch.manual_seed(0)
    tuned = build_model_on(
        MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=64, vocab_size=50304, peft_config=lora),
        device="cpu",
    ).eval()
    with torch.no_grad():
        for name, p in tuned.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.5)
    save_adapter(tuned, lora, tmp_path / "adapter")
    net, tok = load_for_generation(str(tmp_path / "base"), adapter=str(tmp_path / "adapter"))
    assert generate(net, tok, PROMPTS, cfg) == generate(tuned, tokenizer, PROMPTS, cfg)
    assert generate(net, tok, PROMPTS, cfg) != generate(model, tokenizer, PROMPTS, cfg)
