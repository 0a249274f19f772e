"""Packed finetuning rows give every example the same loss as its padded row (tiny MPT with sequence ids)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from foundry.data.finetune import FinetuneDataConfig, build_finetune_dataloader
from foundry.models.mpt import MPTConfig, MPTForCausalLM
from streaming.world import World


def _example_losses(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> list[float]:
    """Summed next-token loss per example (per sequence id when packed, per row otherwise), in row order."""
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits.float()
    token = F.cross_entropy(logits[:, :-1].transpose(1, 2), batch["labels"][:, 1:], reduction="none")
    seq = batch.get("sequence_id", batch["attention_mask"] - 1)[:, 1:]
    out = []
    for r in range(token.shape[0]):
        for k in range(int(seq[r].max()) + 1):
            out.append(float(token[r][seq[r] == k].sum()))
    return out


@pytest.mark.slow
def test_packed_losses_equal_padded(tmp_path, neox):
    rows = [{"prompt": f"Question {i}: " + "why? " * (i % 5), "response": f" because {i}"} for i in range(12)]
    rows.append({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    attn = {"attn_impl": "torch", "attn_uses_sequence_id": True}
    model = MPTForCausalLM(
        MPTConfig(d_model=32, n_heads=4, n_layers=2, vocab_size=len(neox), max_seq_len=64, attn_config=attn)
    ).eval()

    def losses(packing: float | None, batch_size: int) -> list[float]:
        cfg = FinetuneDataConfig(hf_name=str(tmp_path), packing_ratio=packing, shuffle=False)
        loader = build_finetune_dataloader(
            cfg,
            tokenizer=neox,
            device_batch_size=batch_size,
            world=World(),
            split="train",
            max_seq_len=64,
            seed=0,
        )
        return sorted(x for b in loader for x in _example_losses(model, b))

    padded, packed = losses(None, 1), losses(3.25, 4)  # 13 examples into 4 rows (the rest stays leftover)
    assert len(padded) == 13 and 8 <= len(packed) <= 13
    for loss in packed:  # each packed example's loss is one of the padded ones (they are all distinct)
        match = min(range(len(padded)), key=lambda i: abs(padded[i] - loss))
        torch.testing.assert_close(loss, padded.pop(match), atol=1e-4, rtol=1e-5)
