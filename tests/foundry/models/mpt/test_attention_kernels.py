"""`attn_config.attn_impl` (issue 43): `flash` / `cudnn` put that SDPA kernel first and fall back to the others
(so the CPU, masks and odd shapes still run, with the same numbers), inside one compiled graph."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from torch.nn.attention import SDPBackend

from foundry.models.mpt import MPTConfig, MPTForCausalLM
from foundry.models.mpt.attention import sdpa_order
from foundry.parallel.wrap import transformer_blocks


def _model(impl: str, **attn) -> MPTForCausalLM:
    torch.manual_seed(0)
    cfg = MPTConfig(d_model=64, n_heads=4, n_layers=2, vocab_size=128, max_seq_len=32,
                    attn_config={"attn_impl": impl, **attn})  # fmt: skip
    return MPTForCausalLM(cfg)


def test_the_chosen_kernel_comes_first_and_every_other_follows():
    assert sdpa_order("torch") is None  # PyTorch's own order
    for impl, first in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        order = sdpa_order(impl)
        assert order is not None and order[0] == first and SDPBackend.MATH in order and len(set(order)) == 4


@pytest.mark.parametrize("impl", ["flash", "cudnn"])
@pytest.mark.parametrize("attn", [{}, {"alibi": True}], ids=["causal", "alibi-mask"])
def test_every_kernel_choice_computes_the_same_model_on_cpu(impl, attn):
    ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(1))
    ref, got = _model("torch", **attn), _model(impl, **attn)
    a, b = ref(ids, labels=ids), got(ids, labels=ids)
    torch.testing.assert_close(b.logits, a.logits)
    a.loss.backward()
    b.loss.backward()
    for p, q in zip(ref.parameters(), got.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad)


def test_the_kernel_choice_compiles_into_one_graph():
    block = transformer_blocks(_model("cudnn"))[0]
    counter = CompileCounter()
    compiled = torch.compile(block.forward, fullgraph=True, backend=counter)
    x = torch.randn(2, 32, 64)
    torch.testing.assert_close(compiled(x), block(x))
    assert counter.frame_count == 1
