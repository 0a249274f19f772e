"""`HFExport`: HF folders every N steps and at the end (tokenizer included), LoRA merged or as an adapter
folder, to a local folder or a (loopback) S3 bucket."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from foundry.callbacks import CallbacksConfig, HFExport, HFExportConfig, build_callbacks
from foundry.models import MPTModelConfig, build_model_on, load_pretrained
from foundry.models.peft import PeftConfig
from foundry.tokenizers import TokenizerConfig, build_tokenizer

TINY = {"d_model": 32, "n_heads": 2, "n_layers": 2, "max_seq_len": 16, "vocab_size": 50304}


@pytest.fixture(scope="module")
def tokenizer(neox_tokenizer_path):
    return build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path)))


def _trainer(model: torch.nn.Module, step: int) -> SimpleNamespace:
    return SimpleNamespace(model=model, state=SimpleNamespace(step=step))


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(torch.arange(12).reshape(2, 6)).logits


def test_every_n_steps_and_at_the_end_with_the_tokenizer(tmp_path, tokenizer):
    torch.manual_seed(0)
    schema = MPTModelConfig(**TINY)
    model = build_model_on(schema, device="cpu")
    cfg = HFExportConfig(every_n_steps=2, dtype="float32")
    cb, _liveness = build_callbacks(
        CallbacksConfig(hf_export=cfg),
        world_size=1,
        model_config=schema,
        tokenizer=tokenizer,
        run_dir=tmp_path,
    )
    assert isinstance(cb, HFExport)
    for step in (1, 2, 3):
        cb.on_step_end(_trainer(model, step), step_seconds=0.1)
    cb.on_fit_end(_trainer(model, 3))
    cb.on_fit_end(_trainer(model, 3))  # the same step twice: one export
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["ba2", "ba3"]
    done = json.loads((tmp_path / "hf/ba3/export.json").read_text())
    assert done["step"] == 3 and "tokenizer.json" in done["files"]
    torch.testing.assert_close(_logits(load_pretrained(tmp_path / "hf/ba3")), _logits(model))


def test_lora_merged_or_as_an_adapter_folder(tmp_path, tokenizer):
    from foundry.models.peft.folder import load_adapter

    torch.manual_seed(0)
    lora = PeftConfig(r=2, lora_alpha=4, lora_dropout=0.0)
    schema = MPTModelConfig(**TINY, peft_config=lora)
    model = build_model_on(schema, device="cpu")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.1)
    want = _logits(model)
    merged = HFExport(
        HFExportConfig(dtype="float32"), model_config=schema, tokenizer=tokenizer, run_dir=tmp_path
    )
    merged.on_fit_end(_trainer(model, 4))
    out = load_pretrained(tmp_path / "hf/ba4")
    assert not any("lora" in k for k in out.state_dict())
    torch.testing.assert_close(_logits(out), want, rtol=1e-5, atol=1e-5)
    assert any(".lora_A." in n for n, _ in model.named_parameters())  # the live model was not merged
    adapter_cfg = HFExportConfig(save_folder=str(tmp_path / "adapters"), merge_adapters=False)
    HFExport(adapter_cfg, model_config=schema, tokenizer=None, run_dir=tmp_path).on_fit_end(
        _trainer(model, 4)
    )
    torch.manual_seed(0)
    base = build_model_on(MPTModelConfig(**TINY), device="cpu")  # same seed: the same base weights
    torch.testing.assert_close(_logits(load_adapter(base, tmp_path / "adapters/ba4")), want)


def test_exports_to_a_bucket(tmp_path, tokenizer, s3_bucket):
    from foundry.checkpoint import CheckpointStore

    torch.manual_seed(0)
    schema = MPTModelConfig(**TINY)
    model = build_model_on(schema, device="cpu")
    cfg = HFExportConfig(save_folder=f"{s3_bucket}/hf")
    HFExport(cfg, model_config=schema, tokenizer=tokenizer, run_dir=tmp_path).on_fit_end(_trainer(model, 5))
    files = CheckpointStore(f"{s3_bucket}/hf").list()
    assert "ba5/export.json" in files and "ba5/config.json" in files and "ba5/tokenizer.json" in files


def test_config_is_checked():
    with pytest.raises(ValueError, match="callbacks.hf_export.dtype"):
        HFExportConfig(dtype="fp8")
    with pytest.raises(ValueError, match="model config"):
        build_callbacks(CallbacksConfig(hf_export=HFExportConfig()), world_size=1)
