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

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from foundry.eval.prompts import Request
from foundry.models.cache_names import CACHE_NAME, cache_field, output_cache
from foundry.precision import autocast

__all__ = ["RowScore", "generate_greedy", "score_requests"]


@dataclass
class RowScore:
    """One request's result: summed log-likelihood, its token count, whether greedy decoding matches."""

    logprob: float
    num_tokens: int
    greedy: bool
    token_logprobs: tuple[float, ...] = ()
    min_top_prob: float = 1.0
    """The smallest, over continuation positions, of the highest next-token probability (LM calibration)."""


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


def _base_model(model: nn.Module) -> nn.Module:
    """`model.base_model`: a transformers causal LM's body (hidden states, no LM head)."""
    base = model.base_model
    assert isinstance(base, nn.Module)
    return base


def logit_head(model: nn.Module, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """hidden states -> logits for `model` (its `logits` method, else its output embedding with the config's
    final softcapping), or None when that does not reproduce `model(...).logits` on a probe input.

    Scoring then runs `model.base_model` and unembeds only the scored positions (the unembedding is most of
    the compute of a small model with a 50k vocabulary).
    """
    fn = getattr(model, "logits", None)
    if not callable(fn):
        get = getattr(model, "get_output_embeddings", None)
        lm_head = get() if callable(get) else None
        if lm_head is None or getattr(model, "base_model", model) is model:
            return None
        cap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)

        def fn(hidden: torch.Tensor) -> torch.Tensor:
            out = lm_head(hidden)
            return cap * torch.tanh(out / cap) if cap else out

    ids = torch.arange(1, 9, device=device)[None]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            full = model(input_ids=ids, use_cache=False).logits.float()
            mine = fn(_base_model(model)(input_ids=ids, use_cache=False).last_hidden_state).float()
    except Exception:
        # any mismatch in the interface: use full forwards
        return None
    finally:
        model.train(was_training)
    return fn if mine.shape == full.shape and torch.allclose(mine, full, rtol=1e-4, atol=1e-4) else None


def _forward_scores(
    model: nn.Module,
    head: Callable[[torch.Tensor], torch.Tensor] | None,
    ids: torch.Tensor,
    targets: Sequence[Sequence[int]],
    starts: Sequence[int],
    # attention_mask, position_ids, the cache (`cache_field`)
    **kwargs: Any,
) -> list[RowScore]:
    """One forward; row i's `targets[i]` are predicted at positions starts[i] .. starts[i]+len-1."""
    lens = [len(t) for t in targets]
    rows = torch.repeat_interleave(torch.arange(len(targets)), torch.tensor(lens)).to(ids.device)
    pos = torch.tensor([s + j for s, n in zip(starts, lens) for j in range(n)], device=ids.device)
    tgt = torch.tensor([t for row in targets for t in row], device=ids.device)
    use_cache = CACHE_NAME in kwargs
    if head is None:
        logits = model(input_ids=ids, use_cache=use_cache, **kwargs).logits[rows, pos]
    else:
        hidden = _base_model(model)(input_ids=ids, use_cache=use_cache, **kwargs).last_hidden_state
        logits = head(hidden[rows, pos])
    lp = logits.float().log_softmax(-1)
    tok = lp.gather(-1, tgt[:, None]).squeeze(-1).double().cpu()
    top, arg = lp.max(-1)
    hit = (arg == tgt).cpu()
    top = top.exp().cpu()
    return [
        RowScore(float(a.sum()), n, bool(b.all()), tuple(a.tolist()), float(c.min()))
        for a, b, c, n in zip(tok.split(lens), hit.split(lens), top.split(lens), lens)
    ]


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
    head: Callable[[torch.Tensor], torch.Tensor] | None,
    progress: Callable[[int], None] | None = None,
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
        starts = [len(requests[i].context) - 1 for i in batch]
        with autocast(precision, device=device):
            scores = _forward_scores(
                model, head, ids, [requests[i].continuation for i in batch], starts, **kwargs
            )
        out.update(zip(batch, scores))
        if progress is not None:
            progress(len(batch))
    return out


def _shared_prefix(group: Sequence[Request]) -> int:
    """Tokens every row of the group shares, capped so each row's first scored position is after them."""
    rows = [r.context + r.continuation for r in group]
    limit = min(len(r.context) for r in group) - 1
    n = 0
    while n < limit and all(row[n] == rows[0][n] for row in rows):
        n += 1
    return n


def _worth_caching(group: Sequence[Request], min_saving: float = 0.25) -> bool:
    """Reuse the prefix when that skips at least `min_saving` of the group's tokens (the masked two-pass
    forward costs more per token than one causal pass, so short shared prefixes run whole)."""
    if len(group) < 2:
        return False
    total = sum(len(r.context) + len(r.continuation) for r in group)
    return _shared_prefix(group) * (len(group) - 1) >= min_saving * total


def _cached_batches(
    requests: Sequence[Request], groups: list[list[int]], *, batch_size: int, max_seq_len: int | None
) -> Iterator[list[list[int]]]:
    """Consecutive runs of `groups` with at most `batch_size` rows (a lone bigger group still forms one
    batch) whose longest shared prefix + longest suffix is at most `max_seq_len` (None: no limit)."""
    batch: list[list[int]] = []
    rows = p_len = s_len = 0
    for g in groups:
        shared = _shared_prefix([requests[i] for i in g])
        suffix = max(len(requests[i].context) + len(requests[i].continuation) - 1 - shared for i in g)
        fits = rows + len(g) <= batch_size and (
            max_seq_len is None or max(p_len, shared) + max(s_len, suffix) <= max_seq_len
        )
        if batch and not fits:
            yield batch
            batch, rows, p_len, s_len = [], 0, 0, 0
        batch.append(g)
        rows, p_len, s_len = rows + len(g), max(p_len, shared), max(s_len, suffix)
    if batch:
        yield batch


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
    head: Callable[[torch.Tensor], torch.Tensor] | None,
    max_seq_len: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[int, RowScore]:
    """Per group: the shared prefix once (left-padded, masked), then every row's suffix over its KV cache.
    Batches (`_cached_batches`) never pad beyond `max_seq_len`: one group alone always fits, as its rows do.
    """
    base = _base_model(model)
    groups = sorted(groups, key=lambda g: -max(len(requests[i].context) for i in g))
    out: dict[int, RowScore] = {}
    for batch in _cached_batches(requests, groups, batch_size=batch_size, max_seq_len=max_seq_len):
        shared = [_shared_prefix([requests[i] for i in g]) for g in batch]
        prefixes = [requests[g[0]].context[:n] for g, n in zip(batch, shared)]
        p_len = max(shared)
        p_ids = _pad_left(prefixes, p_len, pad_id, device)
        p_mask = (
            torch.arange(p_len, device=device)[None] >= p_len - torch.tensor(shared, device=device)[:, None]
        )
        p_mask = p_mask.long()
        with autocast(precision, device=device):
            prefix_out = base(
                input_ids=p_ids, attention_mask=p_mask, position_ids=_positions(p_mask), use_cache=True
            )
        cache = output_cache(prefix_out)
        # the prefix forward ran with use_cache=True
        assert cache is not None
        owner = [gi for gi, g in enumerate(batch) for _ in g]
        flat = [i for g in batch for i in g]
        cut = [shared[gi] for gi in owner]
        suffixes = [(requests[i].context + requests[i].continuation)[n:-1] for i, n in zip(flat, cut)]
        s_len = max(len(s) for s in suffixes)
        s_ids = _pad_right(suffixes, s_len, pad_id, device)
        # int64; transformers types it `LongTensor`
        beam_idx: Any = torch.tensor(owner, device=device)
        cache.reorder_cache(beam_idx)
        mask = torch.cat([p_mask[owner], torch.ones(len(flat), s_len, dtype=torch.long, device=device)], 1)
        pos = torch.tensor(cut, device=device)[:, None] + torch.arange(s_len, device=device)[None]
        starts = [len(requests[i].context) - 1 - n for i, n in zip(flat, cut)]
        conts = [requests[i].continuation for i in flat]
        with autocast(precision, device=device):
            scores = _forward_scores(
                model,
                head,
                s_ids,
                conts,
                starts,
                attention_mask=mask,
                position_ids=pos,
                **cache_field(cache),
            )
        out.update(zip(flat, scores))
        if progress is not None:
            progress(len(flat))
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
    max_seq_len: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[RowScore]:
    """Log-likelihood of each request's continuation given its context.

    Args:
        model: a causal LM (`model(input_ids, attention_mask, position_ids, cache).logits`, the cache named as
            in `cache_names`).
        requests: the rows. device: where the model is. batch_size: rows per forward.
        pad_id: the padding token id.
        groups: request indices sharing a prefix (the choices of a question): each group's prefix runs
            once and its KV cache is reused (rows of no group, or groups with nothing shared, run whole).
        pad_to_max_seq_len: pad every row to this length with an attention mask (llm-foundry's way;
            groups are ignored); None for dynamic padding.
        precision: fp32, amp_bf16 or amp_fp16 (autocast).
        max_seq_len: the model's sequence limit: batches of cached groups never pad beyond it (every
            request must fit it on its own); None for no limit.
        progress: called with the number of requests each batch scored (`foundry.eval.progress`).

    Returns:
        One `RowScore` per request, in order.
    """
    was_training = model.training
    model.eval()
    common: dict[str, Any] = {
        "device": device,
        "batch_size": batch_size,
        "pad_id": pad_id,
        "precision": precision,
        "progress": progress,
    }
    try:
        # the reference: full logits over every padded position
        if pad_to_max_seq_len is not None:
            everything = list(range(len(requests)))
            scores = _score_full(model, requests, everything, pad_to=pad_to_max_seq_len, head=None, **common)
        else:
            head = logit_head(model, device)
            cached = [g for g in groups or [] if _worth_caching([requests[i] for i in g])]
            in_group = {i for g in cached for i in g}
            rest = [i for i in range(len(requests)) if i not in in_group]
            scores = _score_full(model, requests, rest, pad_to=None, head=head, **common)
            if cached:
                scores.update(
                    _score_cached(model, requests, cached, head=head, max_seq_len=max_seq_len, **common)
                )
    finally:
        model.train(was_training)
    return [scores[i] for i in range(len(requests))]


@torch.no_grad()
def generate_greedy(
    model: nn.Module,
    contexts: Sequence[Sequence[int]],
    *,
    # a transformers tokenizer
    tokenizer: Any,
    device: torch.device,
    batch_size: int,
    max_new_tokens: int,
    stop: Sequence[str] = (),
    pad_to: int | None = None,
    precision: str = "fp32",
    progress: Callable[[int], None] | None = None,
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
    head = None if pad_to is not None else logit_head(model, device)
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
                kwargs = {
                    "attention_mask": mask,
                    "position_ids": pos,
                    "use_cache": True,
                    **cache_field(cache),
                }
                with autocast(precision, device=device):
                    if head is None:
                        res = model(input_ids=step_ids, **kwargs)
                        last = res.logits[:, -1]
                    else:
                        # unembed only the last position
                        res = _base_model(model)(input_ids=step_ids, **kwargs)
                        last = head(res.last_hidden_state[:, -1])
                cache = output_cache(res)
                nxt = last.float().argmax(-1)
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
            if progress is not None:
                progress(len(batch))
    finally:
        model.train(was_training)
    return [texts[i] for i in range(len(contexts))]
