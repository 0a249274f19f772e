"""Scoring numerics: batched / KV-reusing / padded scoring against a naive one-row-at-a-time forward."""

from __future__ import annotations

import pytest
import torch

from foundry.eval.config import ICLTaskConfig
from foundry.eval.prompts import Request, build_prompts
from foundry.eval.runner import ICLTask, evaluate_task
from foundry.eval.scorer import generate_greedy, score_requests
from foundry.eval.synthetic import generate_offline
from tests.foundry.eval.conftest import tiny_mpt


def _requests(tok, name: str, kind: str, shots: int = 2, n: int = 12):
    cfg = ICLTaskConfig(label=name, dataset_uri=f"offline://{name}", icl_task_type=kind)
    examples = build_prompts(
        cfg, generate_offline(name, n=n), tok, num_fewshot=shots, max_seq_len=256
    ).examples
    requests, groups = [], []
    for ex in examples:
        groups.append(list(range(len(requests), len(requests) + len(ex.requests))))
        requests.extend(ex.requests)
    return requests, groups


@torch.no_grad()
def _naive(model, requests):
    """Summed log-likelihood and greedy match of each continuation: one unpadded forward per row."""
    out = []
    for r in requests:
        ids = torch.tensor([r.context + r.continuation])
        logp = model(input_ids=ids[:, :-1]).logits[0].float().log_softmax(-1)
        pos = torch.arange(len(r.context) - 1, len(r.context) - 1 + len(r.continuation))
        tgt = torch.tensor(r.continuation)
        out.append((float(logp[pos, tgt].sum()), bool((logp[pos].argmax(-1) == tgt).all())))
    return out


def _gpt2(tmp_path, vocab: int):
    transformers = pytest.importorskip("transformers")
    from foundry.models import HFCausalLMConfig, build_model

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=256, n_embd=32, n_layer=2, n_head=4)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "gpt2")
    return build_model(HFCausalLMConfig(pretrained_model_name_or_path=str(tmp_path / "gpt2"))).eval()


@pytest.mark.parametrize("variant", ["learned", "alibi", "rope", "gpt2"])
@pytest.mark.parametrize(
    ("name", "kind"), [("arithmetic_mc", "multiple_choice"), ("compare_schema", "schema")]
)
def test_choice_scores_equal_a_naive_forward_per_choice(icl_tokenizer, tmp_path, variant, name, kind):
    attn = {"alibi": {"alibi": True}, "rope": {"rope": True}}.get(variant, {})
    model = _gpt2(tmp_path, 320) if variant == "gpt2" else tiny_mpt(**attn)
    requests, groups = _requests(icl_tokenizer, name, kind)
    naive = _naive(model, requests)
    pad = icl_tokenizer.eos_token_id
    common = {"device": torch.device("cpu"), "batch_size": 7, "pad_id": pad}
    runs = {
        "cached": score_requests(model, requests, groups=groups, **common),
        "dynamic": score_requests(model, requests, **common),
        "padded": score_requests(model, requests, pad_to_max_seq_len=256, **common),
    }
    for mode, scores in runs.items():
        for s, (lp, greedy), r in zip(scores, naive, requests):
            assert s.logprob == pytest.approx(lp, abs=1e-5 * len(r.continuation)), mode  # 1e-5 per token
            assert s.num_tokens == len(r.continuation) and s.greedy == greedy, mode


def test_cached_context_really_shares_the_prefix(icl_tokenizer):
    from foundry.eval.scorer import _shared_prefix

    requests, groups = _requests(icl_tokenizer, "arithmetic_mc", "multiple_choice")
    for g in groups:
        shared = _shared_prefix([requests[i] for i in g])
        assert shared == len(requests[g[0]].context) - 1  # everything but the last context token


@torch.no_grad()
def test_greedy_generation_equals_a_naive_loop(icl_tokenizer):
    model = tiny_mpt(alibi=True)
    contexts = [icl_tokenizer(f"{a} + {a} =")["input_ids"] for a in range(3, 40, 6)]
    out = generate_greedy(
        model, contexts, tokenizer=icl_tokenizer, device=torch.device("cpu"), batch_size=3, max_new_tokens=6
    )
    padded = generate_greedy(
        model,
        contexts,
        tokenizer=icl_tokenizer,
        device=torch.device("cpu"),
        batch_size=4,
        max_new_tokens=6,
        pad_to=40,
    )
    for ctx, text, text_padded in zip(contexts, out, padded):
        ids = list(ctx)
        for _ in range(6):
            nxt = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            if nxt == icl_tokenizer.eos_token_id:
                break
            ids.append(nxt)
        assert text == text_padded == icl_tokenizer.decode(ids[len(ctx) :], skip_special_tokens=True)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("repeat_copy", "language_modeling"),
        ("compare_schema", "schema"),
        ("arithmetic", "generation_task_with_answers"),
    ],
)
def test_fast_and_padded_task_results_are_identical(icl_tokenizer, icl_model, name, kind):
    cfg = ICLTaskConfig(label=name, dataset_uri=f"offline://{name}", icl_task_type=kind)
    task = ICLTask(cfg, 3, generate_offline(name, n=20), max_seq_len=256)
    fast = evaluate_task(icl_model, icl_tokenizer, task, device="cpu", batch_size=8)
    ref = evaluate_task(icl_model, icl_tokenizer, task, device="cpu", batch_size=8, pad_to_max_seq_len=True)
    assert fast.metrics == ref.metrics
    for a, b in zip(fast.examples, ref.examples):
        for key in ("logprob", "choice_logprobs"):
            if key in a:
                assert a[key] == pytest.approx(b[key], abs=1e-4)
        assert a.get("output") == b.get("output") and a["correct"] == b["correct"]


def test_cached_batches_never_exceed_max_seq_len():
    """Item 3: a batch padded to the longest prefix (one question) plus the longest suffix (another) used to
    exceed the model's max_seq_len (`sequence length ... exceeds max_seq_len`); now it is split."""
    model = tiny_mpt()  # max_seq_len 256, learned positions
    g = torch.Generator().manual_seed(0)

    def question(ctx_len: int, cont_len: int) -> list:
        ctx = torch.randint(1, 320, (ctx_len,), generator=g).tolist()
        return [Request(ctx, torch.randint(1, 320, (cont_len,), generator=g).tolist()) for _ in range(4)]

    # long shared context + short choices, short context + long choices: each question fills 256 tokens
    requests = question(250, 6) + question(100, 156) + question(200, 56) + question(128, 128)
    groups = [list(range(i, i + 4)) for i in range(0, 16, 4)]
    common = {"device": torch.device("cpu"), "batch_size": 16, "pad_id": 0}
    cached = score_requests(model, requests, groups=groups, max_seq_len=256, **common)
    plain = score_requests(model, requests, **common)
    naive = _naive(model, requests)
    for c, p, (lp, greedy) in zip(cached, plain, naive):
        assert c.logprob == pytest.approx(p.logprob, abs=1e-5 * c.num_tokens)
        assert c.logprob == pytest.approx(lp, abs=1e-5 * c.num_tokens) and c.greedy == p.greedy == greedy


def test_cached_and_uncached_multiple_choice_agree_on_rows_filling_max_seq_len(icl_tokenizer):
    """Multiple choice through `evaluate_task` with contexts cut to max_seq_len: KV reuse changes nothing."""
    model = tiny_mpt()
    rows = []
    for i in range(12):
        words = " ".join(f"{a} + {b} = {a + b}." for a, b in zip(range(i, i + 40), range(3, 43)))
        if i % 2:
            rows.append({"query": words, "choices": ["1", "2", "3", "4"], "gold": i % 4})
        else:
            rows.append(
                {"query": f"{i} + 1 =", "choices": [words[: 40 * (j + 1)] for j in range(4)], "gold": 1}
            )
    cfg = ICLTaskConfig(label="fill", dataset_uri="x.jsonl", icl_task_type="multiple_choice")
    task = ICLTask(cfg, 3, rows, max_seq_len=160)
    on = evaluate_task(model, icl_tokenizer, task, device="cpu", batch_size=16)
    off = evaluate_task(model, icl_tokenizer, task, device="cpu", batch_size=16, cache_context=False)
    examples = build_prompts(cfg, rows, icl_tokenizer, num_fewshot=3, max_seq_len=160).examples
    lengths = [len(r.context) + len(r.continuation) for ex in examples for r in ex.requests]
    assert max(lengths) == 160 and on.skipped == off.skipped == 0  # rows really fill max_seq_len
    assert on.metrics == off.metrics
    for a, b in zip(on.examples, off.examples):
        assert a["choice_logprobs"] == pytest.approx(b["choice_logprobs"], abs=1e-5)
        assert a["pred"] == b["pred"] and a["correct"] == b["correct"]
