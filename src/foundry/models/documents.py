"""Document masking inside a model: positions that restart per document and a block-diagonal causal mask.

Design note: a packed row carries `sequence_id` (B, S) (built by the data collator, `foundry.data.documents`).
Two things make each document behave exactly as if it were run alone: attention stays inside the document
(block-diagonal causal mask) and its positions count from 0 at its first token. Both are derived here from
`sequence_id` alone, with whole-tensor ops (`cummax`, no loop over documents), so MPT and any
transformers model (`hf_causal_lm`) share one definition. A document is a run of equal ids (positions
restart wherever the id changes), so ids need not be consecutive numbers.

llm-foundry masks attention by sequence id but keeps row positions (a document that starts at column k
starts at position k); restarting them is what makes a packed row's losses equal its documents' losses
for learned position embeddings (RoPE and ALiBi only see relative distances inside a document).
"""

from __future__ import annotations

import torch

__all__ = ["document_causal_mask", "document_positions"]


def document_positions(sequence_id: torch.Tensor) -> torch.Tensor:
    """Position of each token inside its document.

    Args:
        sequence_id: (B, S) integer document ids.

    Returns:
        (B, S) int64: 0 at each document's first token, +1 per token after it.
    """
    seq = sequence_id.shape[-1]
    idx = torch.arange(seq, device=sequence_id.device).expand_as(sequence_id)
    starts = torch.ones_like(sequence_id, dtype=torch.bool)
    starts[:, 1:] = sequence_id[:, 1:] != sequence_id[:, :-1]
    # start of t's document
    first = torch.where(starts, idx, torch.zeros_like(idx)).cummax(dim=-1).values
    return idx - first


def document_causal_mask(sequence_id: torch.Tensor) -> torch.Tensor:
    """Boolean attention mask: query i sees key j iff j <= i and both have the same id.

    Args:
        sequence_id: (B, S) integer document ids (padding must have an id of its own).

    Returns:
        (B, 1, S, S) bool, True = may attend. Every row allows at least its diagonal, so no row is
        fully masked (no NaN from an empty softmax).
    """
    seq = sequence_id.shape[-1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=sequence_id.device).tril()
    # (B, S, S)
    same = sequence_id[:, :, None] == sequence_id[:, None, :]
    return (same & causal)[:, None]
