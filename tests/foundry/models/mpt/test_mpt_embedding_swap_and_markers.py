"""MPT input-embedding swaps (resize, type check) and the init markers that layers put on Linear modules."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from foundry.models.mpt import MPTConfig, MPTForCausalLM
from foundry.models.mpt.layers import FUSED_MARK, RESIDUAL_MARK

V, D = 64, 32


def tiny() -> MPTForCausalLM:
    torch.manual_seed(0)
    cfg = MPTConfig(d_model=D, n_heads=4, n_layers=1, vocab_size=V, max_seq_len=16)
    return MPTForCausalLM(cfg).eval()


def test_resize_token_embeddings_grows_logits():
    m = tiny()
    m.resize_token_embeddings(V + 8)
    assert isinstance(m.get_input_embeddings(), nn.Embedding)
    assert m.transformer.wte.num_embeddings == V + 8
    assert m(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, V + 8)


def test_set_input_embeddings_rejects_non_embedding():
    m = tiny()
    with pytest.raises(TypeError, match="nn.Embedding, got Linear"):
        m.set_input_embeddings(nn.Linear(D, V))
    with pytest.raises(TypeError, match="nn.Embedding, got Linear"):
        m.transformer.set_input_embeddings(nn.Linear(D, V))


def test_init_markers_on_residual_and_fused_linears():
    block = tiny().transformer.blocks[0]
    assert getattr(block.attn.out_proj, RESIDUAL_MARK) is True
    assert getattr(block.ffn.down_proj, RESIDUAL_MARK) is True
    assert not hasattr(block.ffn.up_proj, RESIDUAL_MARK)
    assert getattr(block.attn.Wqkv, FUSED_MARK) == (0, [D, 2 * D])
