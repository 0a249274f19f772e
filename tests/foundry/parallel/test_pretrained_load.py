"""`init_device: meta` + `pretrained: true` in one process: the model is built on meta and its safetensors
loaded when `build_model_on` materialises it; the result equals a plain `from_pretrained` load exactly
(parameters, tied embeddings, non-persistent buffers such as rotary `inv_freq` and MPT's ALiBi slopes,
logits). Also llm-foundry's big-model finetune YAML shape through the translator. Before this feature the
schema refused the combination (`model.init_device=meta needs model.pretrained=false`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from foundry.models import build_model_on
from foundry.models.hf_causal_lm import HFCausalLMConfig
from foundry.parallel.pretrained_load import load_pretrained_local_, pretrained_folder
from tests.foundry.models._tiny_checkpoints import VOCAB, save_tiny_llama, save_tiny_mpt

REPO = Path(__file__).resolve().parents[3]
KINDS = {
    "mpt-export": save_tiny_mpt,
    "llama": save_tiny_llama,
    "llama-tied": lambda folder: save_tiny_llama(folder, tied=True),
}


@pytest.fixture(scope="module", params=sorted(KINDS))
def checkpoint(request, tmp_path_factory) -> Path:
    return KINDS[request.param](tmp_path_factory.mktemp(request.param))


def _assert_same_model(model: torch.nn.Module, plain: torch.nn.Module) -> None:
    got, want = model.state_dict(), plain.state_dict()
    assert list(got) == list(want)
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
    buffers = dict(model.named_buffers())  # non-persistent ones too (not in the state dict)
    for name, buffer in plain.named_buffers():
        assert buffers[name].dtype == buffer.dtype and torch.equal(buffers[name], buffer), name
    head, plain_head = model.get_output_embeddings(), plain.get_output_embeddings()
    if plain_head is not None:  # tied stays tied (one tensor), untied stays untied
        tied = plain_head.weight is plain.get_input_embeddings().weight
        assert (head.weight is model.get_input_embeddings().weight) == tied
    ids = torch.arange(24).reshape(2, 12) % VOCAB
    assert torch.equal(model(ids).logits, plain(ids).logits)


def test_meta_pretrained_equals_a_plain_load(checkpoint, capsys):
    meta = HFCausalLMConfig(pretrained_model_name_or_path=str(checkpoint), init_device="meta")
    deferred = build_model_on(meta, device="cpu", defer_init=True)  # what FSDP gets: all on meta
    assert all(t.is_meta for t in deferred.state_dict().values())
    assert pretrained_folder(deferred) == checkpoint
    model = build_model_on(meta, device="cpu")
    plain = build_model_on(HFCausalLMConfig(pretrained_model_name_or_path=str(checkpoint)), device="cpu")
    _assert_same_model(model, plain)
    assert "[foundry] pretrained load (rank 0)" in capsys.readouterr().out


def test_meta_pretrained_bf16_matches_plain_bf16(tmp_path):
    folder = save_tiny_llama(tmp_path)
    kw = {"pretrained_model_name_or_path": str(folder), "dtype": "bfloat16"}
    model = build_model_on(HFCausalLMConfig(**kw, init_device="meta"), device="cpu")
    _assert_same_model(model, build_model_on(HFCausalLMConfig(**kw), device="cpu"))


def test_meta_random_init_keeps_tied_embeddings(tmp_path):
    folder = save_tiny_llama(tmp_path, tied=True)
    cfg = HFCausalLMConfig(pretrained_model_name_or_path=str(folder), pretrained=False, init_device="meta")
    model = build_model_on(cfg, device="cpu")  # used to fail: `.to(cpu)` of a meta model
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert not any(t.is_meta for t in (*model.parameters(), *model.buffers()))


def test_clear_errors(tmp_path):
    folder = save_tiny_llama(tmp_path / "ok")
    other = save_tiny_llama(tmp_path / "wide", hidden=48)
    cfg = HFCausalLMConfig(pretrained_model_name_or_path=str(folder), init_device="meta")
    model = build_model_on(cfg, device="cpu", defer_init=True)
    with pytest.raises(
        ValueError, match=r"'model\.embed_tokens\.weight' has shape \[96, 48\] in the checkpoint"
    ):
        load_pretrained_local_(model, other, device="cpu")
    deeper = HFCausalLMConfig(
        pretrained_model_name_or_path=str(folder),
        init_device="meta",
        config_overrides={"num_hidden_layers": 4},
    )
    with pytest.raises(ValueError, match=r"no tensor 'model\.layers\.3\..*state_dict names"):
        build_model_on(deeper, device="cpu")
    (folder / "model.safetensors").rename(folder / "model.bin")
    with pytest.raises(ValueError, match=r"has no \*\.safetensors weights.*model\.init_device=cpu"):
        build_model_on(cfg, device="cpu")


def test_meta_pretrained_with_lora_is_refused(tmp_path):
    pytest.importorskip("peft")
    from foundry.models.peft.schema import PeftConfig

    folder = save_tiny_llama(tmp_path)
    cfg = HFCausalLMConfig(
        pretrained_model_name_or_path=str(folder), init_device="meta", peft_config=PeftConfig(r=2)
    )
    with pytest.raises(ValueError, match="peft_config with model.init_device=meta"):
        build_model_on(cfg, device="cpu")


FINETUNE_YAML = """
variables: {{global_seed: 17, max_seq_len: 64}}
max_seq_len: ${{variables.max_seq_len}}
model:
  name: hf_causal_lm
  pretrained: true
  init_device: {init_device}
  use_auth_token: true
  config_overrides: {{}}
  use_flash_attention_2: false
  pretrained_model_name_or_path: {folder}
tokenizer:
  name: {folder}
  kwargs:
    model_max_length: ${{variables.max_seq_len}}
train_loader:
  name: finetuning
  dataset:
    hf_name: json
    split: train
    max_seq_len: ${{variables.max_seq_len}}
    shuffle: true
    decoder_only_format: true
    allow_pad_trimming: false
  drop_last: true
  num_workers: 0
scheduler: {{name: linear_decay_with_warmup, t_warmup: 0ba, alpha_f: 0}}
optimizer: {{name: decoupled_adamw, lr: 1.0e-5, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0}}
max_duration: 2ep
global_train_batch_size: 16
seed: ${{variables.global_seed}}
device_train_microbatch_size: 2
precision: amp_bf16
fsdp_config:
  sharding_strategy: FULL_SHARD
  mixed_precision: PURE
  activation_checkpointing: true
  activation_checkpointing_reentrant: false
  activation_cpu_offload: false
  limit_all_gathers: true
"""
"""The model/fsdp shape of llm-foundry's big-model finetune YAMLs (dbrx-full-ft: `init_device: mixed`;
mpt-30b / llama finetunes: `init_device: meta`), with a local folder for the hub name."""


@pytest.mark.parametrize("init_device", ["mixed", "meta"])
def test_llmfoundry_big_model_finetune_yaml_translates_and_loads(tmp_path, init_device):
    from foundry.compat.llmfoundry import translate_file
    from foundry.compat.llmfoundry.render import overrides
    from foundry.config import register_configs, to_train_config

    folder = save_tiny_llama(tmp_path / "llama")
    path = tmp_path / "ft.yaml"
    path.write_text(FINETUNE_YAML.format(folder=folder, init_device=init_device))
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = to_train_config(compose("train", overrides=overrides(translate_file(path))))
    assert (cfg.model.init_device, cfg.model.pretrained) == ("meta", True)
    assert cfg.parallelism.strategy == "fsdp" and cfg.parallelism.activation_checkpointing
    model = build_model_on(cfg.model, device="cpu")
    _assert_same_model(
        model, build_model_on(HFCausalLMConfig(pretrained_model_name_or_path=str(folder)), device="cpu")
    )


def test_sharded_checkpoint_files_with_index(tmp_path):
    """Big checkpoints come as several safetensors files and `model.safetensors.index.json` (the hub's 30B,
    DBRX and Llama folders): every tensor is read from the file the index names."""
    from transformers import AutoModelForCausalLM

    single = save_tiny_llama(tmp_path / "one")
    AutoModelForCausalLM.from_pretrained(single).save_pretrained(tmp_path / "many", max_shard_size="40KB")
    assert len(list((tmp_path / "many").glob("*.safetensors"))) > 2
    assert (tmp_path / "many" / "model.safetensors.index.json").is_file()
    cfg = HFCausalLMConfig(pretrained_model_name_or_path=str(tmp_path / "many"), init_device="meta")
    model = build_model_on(cfg, device="cpu")
    _assert_same_model(
        model, build_model_on(HFCausalLMConfig(pretrained_model_name_or_path=str(single)), device="cpu")
    )
