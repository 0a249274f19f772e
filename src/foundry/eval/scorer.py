"""Scoring: continuation log-likelihoods and greedy generation, batched without padding to max_seq_len.

Design note: rows are right-padded only to the longest row of their batch (batches of length-sorted rows),
and no attention mask is passed: with causal attention a real token never sees the padding after it, so
each row's scores are those of an unpadded forward. For multiple choice / schema the rows of one question
share a token prefix (prompt, shots, query); it runs once, left-padded with a mask and explicit position
ids (exact for learned positions, RoPE and ALiBi, whose biases only depend on distances), and its KV cache
is repeated for each choice's suffix. `pad_to_max_seq_len=True` is llm-foundry's way (every row padded to
max_seq_len with a mask, one full forward per row) and exists as the reference for tests and the
benchmark; both give the same numbers up to float rounding. Generation is a greedy loop over a KV cache.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from foundry.eval.prompts import Request

__all__ = ["RowScore", "generate_greedy", "score_requests"]


@dataclass
class RowScore:
    """One request's result: summed log-likelihood, its token count, whether greedy decoding matches."""

    logprob: float
    num_tokens: int
    greedy: bool


def _amp(precision: str, device: torch.device) -> AbstractContextManager:
    if precision == "fp32":
        return nullcontext()
    from foundry.train.precision import autocast

    return autocast(precision, device=device)


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def _pad_right(seqs: Sequence[Sequence[int]], length: int, pad: int, device: torch.device) -> torch.Tensor:
    out = torch.full((len(seqs), length), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out.to(device)


def _pad_left(seqs: Sequence[Sequence[int]], length: int, pad: int, device: torch.device) -> torch.Tensor:
    out = torch.full((len(seqs), length), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            out[i, length - len(s) :] = torch.tensor(s, dtype=torch.long)
    return out.to(device)


def _score_rows(
    logits: torch.Tensor, targets: Sequence[Sequence[int]], starts: Sequence[int]
) -> list[RowScore]:
    """Scores row i's `targets[i]`, predicted by logits at positions starts[i] .. starts[i]+len-1."""
    out = []
    for i, tgt in enumerate(targets):
        n = len(tgt)
        lg = logits[i, starts[i] : starts[i] + n].float().log_softmax(-1)
        ids = torch.tensor(tgt, device=lg.device)
        lp = lg.gather(-1, ids[:, None]).squeeze(-1)
        out.append(RowScore(float(lp.double().sum()), n, bool((lg.argmax(-1) == ids).all())))
    return out


def _full_batches(order: list[int], requests: Sequence[Request], batch_size: int) -> Iterator[list[int]]:
    for i in range(0, len(order), batch_size):
        yield order[i : i + batch_size]


@torch.no_grad()
def _score_full(
    model: nn.Module,
    requests: Sequence[Request],
    idxs: list[int],
    *,
    device: torch.device,
    batch_size: int,
    pad_id: int,
    pad_to: int | None,
    precision: str,
) -> dict[int, RowScore]:
    """Full forwards over context+continuation rows (dynamic padding, or padded to `pad_to` with a mask)."""
    if pad_to is None:
        idxs = sorted(idxs, key=lambda i: -(len(requests[i].context) + len(requests[i].continuation)))
    out: dict[int, RowScore] = {}
    for batch in _full_batches(idxs, requests, batch_size):
        rows = [(requests[i].context + requests[i].continuation)[:-1] for i in batch]
        length = pad_to or max(len(r) for r in rows)
        ids = _pad_right(rows, length, pad_id, device)
        kwargs = {}
        if pad_to is not None:
            lens = torch.tensor([len(r) for r in rows], device=device)
            kwargs["attention_mask"] = (torch.arange(length, device=device)[None] < lens[:, None]).long()
        with _amp(precision, device):
            logits = model(input_ids=ids, use_cache=False, **kwargs).logits
        starts = [len(requests[i].context) - 1 for i in batch]
        for i, score in zip(batch, _score_rows(logits, [requests[i].continuation for i in batch], starts)):
            out[i] = score
    return out


def _shared_prefix(group: Sequence[Request]) -> int:
    """Tokens every row of the group shares, capped so each row's first scored position is after them."""
    rows = [r.context + r.continuation for r in group]
    limit = min(len(r.context) for r in group) - 1
    n = 0
    while n < limit and all(row[n] == rows[0][n] for row in rows):
        n += 1
    return n


@torch.no_grad()
def _score_cached(
    model: nn.Module,
    requests: Sequence[Request],
    groups: list[list[int]],
    *,
    device: torch.device,
    batch_size: int,
    pad_id: int,
    precision: str,
) -> dict[int, RowScore]:
    """Per group: the shared prefix once (left-padded, masked), then every row's suffix over its KV cache."""
    base = model.base_model
    groups = sorted(groups, key=lambda g: -max(len(requests[i].context) for i in g))
    out: dict[int, RowScore] = {}
    start = 0
    while start < len(groups):
        batch, rows = [], 0
        while start < len(groups) and (not batch or rows + len(groups[start]) <= batch_size):
            batch.append(groups[start])
            rows += len(groups[start])
            start += 1
        shared = [_shared_prefix([requests[i] for i in g]) for g in batch]
        prefixes = [requests[g[0]].context[:n] for g, n in zip(batch, shared)]
        p_len = max(shared)
        p_ids = _pad_left(prefixes, p_len, pad_id, device)
        p_mask = (
            torch.arange(p_len, device=device)[None] >= p_len - torch.tensor(shared, device=device)[:, None]
        )
        p_mask = p_mask.long()
        with _amp(precision, device):
            cache = base(
                input_ids=p_ids, attention_mask=p_mask, position_ids=_positions(p_mask), use_cache=True
            ).past_key_values
        owner = [gi for gi, g in enumerate(batch) for _ in g]
        flat = [i for g in batch for i in g]
        cut = [shared[gi] for gi in owner]
        suffixes = [(requests[i].context + requests[i].continuation)[n:-1] for i, n in zip(flat, cut)]
        s_len = max(len(s) for s in suffixes)
        s_ids = _pad_right(suffixes, s_len, pad_id, device)
        cache.reorder_cache(torch.tensor(owner, device=device))
        mask = torch.cat([p_mask[owner], torch.ones(len(flat), s_len, dtype=torch.long, device=device)], 1)
        pos = torch.tensor(cut, device=device)[:, None] + torch.arange(s_len, device=device)[None]
        with _amp(precision, device):
            logits = model(
                input_ids=s_ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True
            ).logits
        starts = [len(requests[i].context) - 1 - n for i, n in zip(flat, cut)]
        for i, score in zip(flat, _score_rows(logits, [requests[i].continuation for i in flat], starts)):
            out[i] = score
    return out


def score_requests(
    model: nn.Module,
    requests: Sequence[Request],
    *,
    device: torch.device,
    batch_size: int,
    pad_id: int,
    groups: list[list[int]] | None = None,
    pad_to_max_seq_len: int | None = None,
    precision: str = "fp32",
) -> list[RowScore]:
    """Log-likelihood of each request's continuation given its context.

    Args:
        model: a causal LM (`model(input_ids, attention_mask, position_ids, past_key_values).logits`).
        requests: the rows. device: where the model is. batch_size: rows per forward.
        pad_id: the padding token id.
        groups: request indices sharing a prefix (the choices of a question): each group's prefix runs
            once and its KV cache is reused (rows of no group, or groups with nothing shared, run whole).
        pad_to_max_seq_len: pad every row to this length with an attention mask (llm-foundry's way;
            groups are ignored); None for dynamic padding.
        precision: fp32, amp_bf16 or amp_fp16 (autocast).

    Returns:
        One `RowScore` per request, in order.
    """
    was_training = model.training
    model.eval()
    try:
        if pad_to_max_seq_len is not None:
            scores = _score_full(
                model, requests, list(range(len(requests))), device=device, batch_size=batch_size,
                pad_id=pad_id, pad_to=pad_to_max_seq_len, precision=precision,
            )  # fmt: skip
        else:
            cached = [g for g in groups or [] if len(g) > 1 and _shared_prefix([requests[i] for i in g]) > 0]
            in_group = {i for g in cached for i in g}
            rest = [i for i in range(len(requests)) if i not in in_group]
            scores = _score_full(
                model,
                requests,
                rest,
                device=device,
                batch_size=batch_size,
                pad_id=pad_id,
                pad_to=None,
                precision=precision,
            )
            if cached:
                scores.update(
                    _score_cached(
                        model,
                        requests,
                        cached,
                        device=device,
                        batch_size=batch_size,
                        pad_id=pad_id,
                        precision=precision,
                    )
                )
    finally:
        model.train(was_training)
    return [scores[i] for i in range(len(requests))]


@torch.no_grad()
def generate_greedy(
    model: nn.Module,
    contexts: Sequence[Sequence[int]],
    *,
    tokenizer: object,
    device: torch.device,
    batch_size: int,
    max_new_tokens: int,
    stop: Sequence[str] = (),
    pad_to: int | None = None,
    precision: str = "fp32",
) -> list[str]:
    """Greedy continuations of each context (left-padded batches over a KV cache), decoded to text.

    A row stops at EOS, at any `stop` string (checked on the decoded text; the text keeps it, the metric
    cuts it) or after `max_new_tokens`. `pad_to` left-pads every context to that length (reference mode).
    """
    eos = getattr(tokenizer, "eos_token_id", None)
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = eos if pad is None else pad
    order = list(range(len(contexts)))
    if pad_to is None:
        order.sort(key=lambda i: -len(contexts[i]))
    texts: dict[int, str] = {}
    was_training = model.training
    model.eval()
    try:
        for b in range(0, len(order), batch_size):
            batch = order[b : b + batch_size]
            length = pad_to or max(len(contexts[i]) for i in batch)
            ids = _pad_left([contexts[i] for i in batch], length, pad or 0, device)
            lens = torch.tensor([len(contexts[i]) for i in batch], device=device)
            mask = (torch.arange(length, device=device)[None] >= length - lens[:, None]).long()
            pos = _positions(mask)
            new: list[list[int]] = [[] for _ in batch]
            done = [False] * len(batch)
            cache = None
            step_ids = ids
            for _ in range(max_new_tokens):
                with _amp(precision, device):
                    res = model(
                        input_ids=step_ids,
                        attention_mask=mask,
                        position_ids=pos,
                        past_key_values=cache,
                        use_cache=True,
                    )
                cache = res.past_key_values
                nxt = res.logits[:, -1].float().argmax(-1)
                for r, tok in enumerate(nxt.tolist()):
                    if done[r]:
                        continue
                    if tok == eos:
                        done[r] = True
                        continue
                    new[r].append(tok)
                    if stop:
                        text = tokenizer.decode(new[r])
                        done[r] = any(s in text for s in stop)
                if all(done):
                    break
                step_ids = nxt[:, None]
                pos = pos[:, -1:] + 1
                mask = torch.cat([mask, torch.ones(len(batch), 1, dtype=mask.dtype, device=device)], 1)
            for r, i in enumerate(batch):
                texts[i] = tokenizer.decode(new[r], skip_special_tokens=True)
    finally:
        model.train(was_training)
    return [texts[i] for i in range(len(contexts))]
