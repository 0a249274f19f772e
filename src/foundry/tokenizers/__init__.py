"""Tokenizers: a `tokenizer.json` file, a local HF folder, or a hub name (default EleutherAI/gpt-neox-20b).

Design note: we return transformers' `PreTrainedTokenizerFast` (what `generate`, lm-eval and
`save_pretrained` expect) but never reach the network on our own: a hub name only works when it is already
in the local HF cache, and otherwise fails with a message naming the exact override to pass
(`tokenizer.name=/path/to/tokenizer.json`). The schema (`TokenizerConfig`, the `tokenizer` group) is in
`config.py`, registered explicitly, never at import.
Special-token roles (eos/bos/unk/pad) are only ever given to tokens the tokenizer already has: a configured
token missing from it is left unset with a warning naming it and the fix, never silently added (which would
grow the vocabulary past the model's). `name: null` means no tokenizer, for datasets of token ids.
"""

from __future__ import annotations

import json
import logging
from dataclasses import fields
from pathlib import Path
from typing import Any

from foundry.env_refs import resolve_recorded
from foundry.rundir import layout
from foundry.tokenizers.config import DEFAULT_TOKENIZER, TokenizerConfig, register_tokenizer_configs

__all__ = [
    "DEFAULT_TOKENIZER",
    "TokenizerConfig",
    "build_tokenizer",
    "padded_vocab_size",
    "round_vocab_size",
    "register_tokenizer_configs",
    "run_tokenizer_config",
]

_ROLES = ("eos_token", "bos_token", "unk_token")

log = logging.getLogger(__name__)


def _offline_error(name: str, err: Exception) -> ValueError:
    return ValueError(
        f"tokenizer {name!r} is not available offline ({type(err).__name__}: {err}). Pass a local file or "
        "folder, e.g. `tokenizer.name=/path/to/gpt-neox-20b/tokenizer.json` (or a folder written by "
        "save_pretrained), or pre-populate the HF cache for this hub name."
    )


def _assign_roles(tok: Any, cfg: TokenizerConfig, *, source: str) -> None:
    """Gives each configured role (eos/bos/unk, then pad) to its token when the tokenizer has that token."""
    vocab = tok.get_vocab()
    missing = []
    for key in _ROLES:
        value = getattr(cfg, key)
        if value and getattr(tok, key, None) is None:
            if value in vocab:
                setattr(tok, key, value)
            else:
                missing.append(f"tokenizer.{key}={value!r}")
    if cfg.pad_token and tok.pad_token is None:
        if cfg.pad_token in vocab:
            tok.pad_token = cfg.pad_token
        else:
            missing.append(f"tokenizer.pad_token={cfg.pad_token!r}")
    if tok.pad_token is None and tok.eos_token is not None:
        # MPT/NeoX have no pad token
        tok.pad_token = tok.eos_token
    if missing:
        specials = sorted({t.content for t in getattr(tok, "added_tokens_decoder", {}).values()})
        log.warning(
            "%s: %s not in this tokenizer, left unset (nothing is added to its vocabulary); set "
            "them to tokens it has (its added tokens: %s) or to null. Without eos/pad, ICL evaluation and "
            "datasets of raw text cannot run; packed token rows train fine",
            source,
            ", ".join(missing),
            specials[:10] or "none",
        )


def build_tokenizer(cfg: TokenizerConfig) -> Any:
    """Loads the tokenizer `cfg` names (a `transformers.PreTrainedTokenizerFast`).

    Returns:
        A `PreTrainedTokenizerFast` with eos/bos/unk/pad set where the tokenizer has the configured tokens
        (pad falls back to eos); its vocabulary is exactly the file's or folder's.

    Raises:
        ValueError: `name` is null (no tokenizer), the file is missing, or a hub name is not cached locally
            (offline), with what to pass.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if cfg.name is None:
        raise ValueError(
            "tokenizer.name is null (no tokenizer) but a tokenizer is needed here (ICL evaluation, datasets "
            "of raw text): pass tokenizer.name=/path/to/tokenizer.json (or a saved folder)"
        )
    path = Path(cfg.name).expanduser()
    if path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise ValueError(f"tokenizer.name={cfg.name!r}: file not found")
        tok: Any = PreTrainedTokenizerFast(tokenizer_file=str(path))
    else:
        local = path.is_dir()
        try:
            tok = AutoTokenizer.from_pretrained(str(path) if local else cfg.name, local_files_only=not local)
        except (OSError, ValueError) as err:
            raise _offline_error(cfg.name, err) from err
    _assign_roles(tok, cfg, source=f"tokenizer.name={cfg.name!r}")
    if cfg.model_max_length is not None:
        tok.model_max_length = cfg.model_max_length
    tok.padding_side = cfg.padding_side
    return tok


def round_vocab_size(n: int, *, multiple: int = 64) -> int:
    """`n` rounded up to `multiple`, the embedding size we suggest for `n` token ids."""
    return (n + multiple - 1) // multiple * multiple


def padded_vocab_size(tokenizer: Any, *, multiple: int = 64) -> int:
    """len(tokenizer) rounded up to `multiple` (gpt-neox-20b: 50277 -> 50304; MPT uses 50368 for headroom)."""
    return round_vocab_size(len(tokenizer), multiple=multiple)


def run_tokenizer_config(checkpoint: str) -> TokenizerConfig | None:
    """The tokenizer of the training run a local checkpoint belongs to, from that run's `run.json`.

    Looks in the checkpoint path and up to three parents
    (`outputs/<run>/checkpoints/ep0-ba600` -> `outputs/<run>`).

    Returns:
        The run's `tokenizer` config, or None for a URL, when no `run.json` is found,
        or when the run had none.
    """
    if "://" in checkpoint:
        return None
    path = Path(checkpoint).expanduser().resolve()
    for parent in [path, *path.parents][:4]:
        run = parent / layout.RUN
        if run.is_file():
            tok = (json.loads(run.read_text()).get("config") or {}).get("tokenizer") or {}
            if not isinstance(tok, dict) or not tok.get("name"):
                return None
            # run.json keeps `${oc.env:...}` as written (issue 39)
            tok = resolve_recorded(tok)
            known = {f.name for f in fields(TokenizerConfig)}
            return TokenizerConfig(**{k: v for k, v in tok.items() if k in known})
    return None
