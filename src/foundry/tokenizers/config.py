"""`TokenizerConfig`, the typed schema of the `tokenizer` config group, and its Hydra registration.

Design note: plain dataclasses, so importing the schema never imports transformers; loading the tokenizer it
names is `foundry.tokenizers.build_tokenizer`. The schema node is registered explicitly
(`register_tokenizer_configs`, called by `foundry.config.register_configs`), never at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_TOKENIZER", "TokenizerConfig", "register_tokenizer_configs"]

DEFAULT_TOKENIZER = "EleutherAI/gpt-neox-20b"


@dataclass(kw_only=True)
class TokenizerConfig:
    """Which tokenizer to load (the `tokenizer` config group)."""

    name: str | None = DEFAULT_TOKENIZER
    """A path to a tokenizer.json, a local folder saved with save_pretrained, or a hub name (cached); null: no
    tokenizer (pretraining on MDS rows of token ids; `model.vocab_size` must exceed the largest id)."""
    model_max_length: int | None = None
    """Truncation length (usually the model's max_seq_len)."""
    eos_token: str | None = "<|endoftext|>"
    """Given the eos role when the tokenizer has this token and no eos of its own (a bare tokenizer.json
    carries no roles); a token the tokenizer lacks is left unset with a warning, never added."""
    bos_token: str | None = "<|endoftext|>"
    unk_token: str | None = "<|endoftext|>"
    pad_token: str | None = None
    """Null -> the eos token (MPT/NeoX has no pad token)."""
    padding_side: str = "right"
    """`right` for training; generation with batches needs `left`."""

    def __post_init__(self) -> None:
        if self.padding_side not in ("left", "right"):
            raise ValueError(f"tokenizer.padding_side={self.padding_side!r}: use left or right")


def register_tokenizer_configs(cs: Any) -> None:
    """Stores the `tokenizer` group schema node `_tokenizer` in a Hydra `ConfigStore`."""
    cs.store(group="tokenizer", name="_tokenizer", node=TokenizerConfig)
