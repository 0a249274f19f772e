"""Tiny random checkpoints saved as safetensors: an MPT through our export (`foundry` format, ALiBi
buffers, tied embeddings) and a Llama-shaped transformers model (rotary `inv_freq`, untied or tied head).
Shared by the meta + pretrained load tests and their torchrun rank script."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from foundry.models.export import export_hf
from foundry.models.mpt import MPTConfig, MPTForCausalLM

VOCAB = 96


def save_tiny_mpt(folder: Path, *, seed: int = 0) -> Path:
    """Our MPT (ALiBi, tied embeddings), exported in the `foundry` format (model_type foundry_mpt)."""
    torch.manual_seed(seed)
    config = MPTConfig(
        d_model=32, n_heads=4, n_layers=3, vocab_size=VOCAB, max_seq_len=32, attn_config={"alibi": True}
    )
    export_hf(MPTForCausalLM(config).eval(), folder, fmt="foundry")
    return folder


def save_tiny_llama(
    folder: Path, *, seed: int = 0, tied: bool = False, hidden: int = 32, layers: int = 3, vocab: int = VOCAB
) -> Path:
    """A Llama-shaped transformers model (rotary embeddings, GQA), saved with `save_pretrained`."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden + 7,  # not a multiple of the world size: uneven shards
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder
