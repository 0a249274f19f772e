"""Tokenizer building: tokenizer.json path, saved folder, offline hub name -> clear error; Hydra group."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from foundry.tokenizers import TokenizerConfig, build_tokenizer, padded_vocab_size, register_tokenizer_configs

CONF = Path(__file__).resolve().parents[2] / "conf"


def test_tokenizer_json_path(neox_tokenizer_path):
    tok = build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path), model_max_length=2048))
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token_id == tok.eos_token_id
    ids = tok("Hello world").input_ids
    assert tok.decode(ids) == "Hello world"
    assert padded_vocab_size(tok) % 64 == 0 and padded_vocab_size(tok) >= len(tok)
    assert tok.model_max_length == 2048


def test_saved_folder_round_trip(neox_tokenizer_path, tmp_path):
    tok = build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path), padding_side="left"))
    tok.save_pretrained(tmp_path)
    again = build_tokenizer(TokenizerConfig(name=str(tmp_path), padding_side="left"))
    assert again("abc def").input_ids == tok("abc def").input_ids and again.padding_side == "left"


def test_offline_hub_name_names_the_override(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="tokenizer.name=/path/to"):
        build_tokenizer(TokenizerConfig(name="nobody/not-a-cached-tokenizer"))
    with pytest.raises(ValueError, match="file not found"):
        build_tokenizer(TokenizerConfig(name=str(tmp_path / "missing.json")))


def test_tokenizer_group_composes_and_rejects_typos():
    register_tokenizer_configs(ConfigStore.instance())
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            for option in sorted(p.stem for p in (CONF / "tokenizer").glob("*.yaml")):
                cfg = OmegaConf.to_object(compose(overrides=[f"+tokenizer={option}"]).tokenizer)
                assert isinstance(cfg, TokenizerConfig)
            with pytest.raises(Exception, match="nmae"):
                compose(overrides=["+tokenizer=gpt-neox-20b", "tokenizer.nmae=x"])
    finally:
        GlobalHydra.instance().clear()
