"""Tokenizers: a `tokenizer.json` file, a local HF folder, or a hub name (default EleutherAI/gpt-neox-20b).

Design note: we return transformers' `PreTrainedTokenizerFast` (what `generate`, lm-eval and
`save_pretrained` expect) but never reach the network on our own: a hub name only works when it is already
in the local HF cache, and otherwise fails with a message naming the exact override to pass
(`tokenizer.name=/path/to/tokenizer.json`). The schema node is registered explicitly, never at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TokenizerConfig", "build_tokenizer", "register_tokenizer_configs", "padded_vocab_size"]

DEFAULT_TOKENIZER = "EleutherAI/gpt-neox-20b"


@dataclass(kw_only=True)
class TokenizerConfig:
    """Which tokenizer to load (the `tokenizer` config group)."""

    name: str = DEFAULT_TOKENIZER
    """A path to a tokenizer.json, a local folder saved with save_pretrained, or a hub name (cached)."""
    model_max_length: int | None = None
    """Truncation length (usually the model's max_seq_len)."""
    eos_token: str | None = "<|endoftext|>"
    """Set when loading from a bare tokenizer.json (which carries no special-token roles)."""
    bos_token: str | None = "<|endoftext|>"
    unk_token: str | None = "<|endoftext|>"
    pad_token: str | None = None
    """Null -> the eos token (MPT/NeoX has no pad token)."""
    padding_side: str = "right"
    """`right` for training; generation with batches needs `left`."""

    def __post_init__(self) -> None:
        if self.padding_side not in ("left", "right"):
            raise ValueError(f"tokenizer.padding_side={self.padding_side!r}: use left or right")


def register_tokenizer_configs(cs: Any) -> None:  # noqa: ANN401 - hydra's ConfigStore
    """Stores the `tokenizer` group schema node `_tokenizer` in a Hydra `ConfigStore`."""
    cs.store(group="tokenizer", name="_tokenizer", node=TokenizerConfig)


def _offline_error(name: str, err: Exception) -> ValueError:
    return ValueError(
        f"tokenizer {name!r} is not available offline ({type(err).__name__}: {err}). Pass a local file or "
        "folder, e.g. `tokenizer.name=/path/to/gpt-neox-20b/tokenizer.json` (or a folder written by "
        "save_pretrained), or pre-populate the HF cache for this hub name."
    )


def build_tokenizer(cfg: TokenizerConfig) -> Any:  # noqa: ANN401 - transformers.PreTrainedTokenizerFast
    """Loads the tokenizer `cfg` names.

    Returns:
        A `PreTrainedTokenizerFast` with eos/bos/unk/pad set (pad falls back to eos).

    Raises:
        ValueError: the file is missing, or a hub name is not cached locally (offline), with what to pass.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(cfg.name).expanduser()
    specials = {k: getattr(cfg, k) for k in ("eos_token", "bos_token", "unk_token") if getattr(cfg, k)}
    if path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise ValueError(f"tokenizer.name={cfg.name!r}: file not found")
        tok = PreTrainedTokenizerFast(tokenizer_file=str(path), **specials)
    else:
        local = path.is_dir()
        try:
            tok = AutoTokenizer.from_pretrained(str(path) if local else cfg.name, local_files_only=not local)
        except (OSError, ValueError) as err:
            raise _offline_error(cfg.name, err) from err
        for key, value in specials.items():
            if getattr(tok, key, None) is None:
                setattr(tok, key, value)
    pad = cfg.pad_token or tok.eos_token
    if pad is not None and tok.pad_token is None:
        tok.pad_token = pad
    if cfg.model_max_length is not None:
        tok.model_max_length = cfg.model_max_length
    tok.padding_side = cfg.padding_side
    return tok


def padded_vocab_size(tokenizer: Any, *, multiple: int = 64) -> int:  # noqa: ANN401
    """len(tokenizer) rounded up to `multiple` (gpt-neox-20b: 50277 -> 50304; MPT uses 50368 for headroom)."""
    n = len(tokenizer)
    return (n + multiple - 1) // multiple * multiple
