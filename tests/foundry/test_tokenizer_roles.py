"""Special-token roles only go to tokens the tokenizer has: a bare tokenizer.json never silently grows by a
configured `<|endoftext|>`; what is missing is named in one warning with the fix. `name: null` = no tokenizer."""

from __future__ import annotations

import logging

import pytest

from foundry.tokenizers import TokenizerConfig, build_tokenizer, run_tokenizer_config


def _bare_tokenizer(path, specials: list[str]) -> str:
    """A tiny word-level tokenizer.json with the given special tokens (and no `<|endoftext|>` unless listed)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate([*specials, "hello", "world", "a", "b"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=specials[0] if specials else "a"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(specials)
    tok.save(str(path))
    return str(path)


def test_a_bare_file_without_endoftext_keeps_its_size_and_warns_naming_the_fix(tmp_path, caplog):
    path = _bare_tokenizer(tmp_path / "tokenizer.json", ["<s>", "</s>", "<unk>"])
    with caplog.at_level(logging.WARNING, logger="foundry.tokenizers"):
        tok = build_tokenizer(TokenizerConfig(name=path))
    assert len(tok) == 7  # nothing added: the model's vocab_size need not change
    assert tok.eos_token is None and tok.pad_token is None and "<|endoftext|>" not in tok.get_vocab()
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    msg = record.getMessage()
    assert "tokenizer.eos_token='<|endoftext|>'" in msg and "tokenizer.bos_token" in msg and "not in" in msg
    assert "</s>" in msg and path in msg and "vocab_size" not in msg


def test_roles_set_to_tokens_the_file_has(tmp_path, caplog):
    path = _bare_tokenizer(tmp_path / "tokenizer.json", ["<s>", "</s>", "<unk>"])
    cfg = TokenizerConfig(name=path, eos_token="</s>", bos_token="<s>", unk_token="<unk>")
    with caplog.at_level(logging.WARNING, logger="foundry.tokenizers"):
        tok = build_tokenizer(cfg)
    assert not caplog.records
    assert (tok.eos_token, tok.bos_token, tok.unk_token, tok.pad_token) == ("</s>", "<s>", "<unk>", "</s>")
    assert len(tok) == 7 and tok.eos_token_id == 1 and tok.pad_token_id == 1


def test_the_neox_file_is_unchanged(neox_tokenizer_path, caplog):
    if not neox_tokenizer_path.is_file():
        pytest.skip("needs ../shared/data/tokenizers/gpt-neox-20b")
    with caplog.at_level(logging.WARNING, logger="foundry.tokenizers"):
        tok = build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path)))
    assert not caplog.records
    assert tok.eos_token == tok.bos_token == tok.unk_token == "<|endoftext|>" and tok.eos_token_id == 0
    assert tok.pad_token_id == 0 and len(tok) == 50281  # as before: the file already has <|endoftext|>


def test_no_tokenizer_is_an_error_only_where_one_is_needed():
    with pytest.raises(ValueError, match="tokenizer.name=/path/to/tokenizer.json"):
        build_tokenizer(TokenizerConfig(name=None))


def test_the_run_json_of_a_checkpoint_names_its_tokenizer(tmp_path):
    import json

    ckpt = tmp_path / "outputs" / "r" / "checkpoints" / "ep0-ba2"
    ckpt.mkdir(parents=True)
    run = {"config": {"tokenizer": {"name": "/x/tokenizer.json", "eos_token": "</s>", "later_key": 1}}}
    (tmp_path / "outputs" / "r" / "run.json").write_text(json.dumps(run))
    cfg = run_tokenizer_config(str(ckpt))
    assert cfg is not None and cfg.name == "/x/tokenizer.json" and cfg.eos_token == "</s>"
    assert run_tokenizer_config(str(tmp_path / "elsewhere")) is None
    assert run_tokenizer_config("s3://bucket/ckpt") is None
