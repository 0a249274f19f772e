"""The trainer with mixture batches (`stream_id`): the model never sees it, every microbatching path still
gives the same step, eval reports each stream's loss, and per-stream train counts are logged and resumed."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from tests.foundry.train.stream_helpers import (
    NAMES,
    ListLogger,
    make_trainer,
    mixture_batches,
    rows_of,
    tiny_model,
    without_streams,
)


class _NoStreamId(torch.nn.Module):
    """Fails if `stream_id` reaches forward; optionally raises a fake CUDA OOM above `limit` rows."""

    def __init__(self, inner: torch.nn.Module, limit: int = 1 << 30) -> None:
        super().__init__()
        self.inner = inner
        self.limit = limit
        self.seen: list[int] = []

    def forward(self, **batch):
        assert "stream_id" not in batch, "stream_id reached the model"
        self.seen.append(batch["input_ids"].shape[0])
        if batch["input_ids"].shape[0] > self.limit:
            raise RuntimeError("CUDA out of memory (fake)")
        return self.inner(**batch)


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize(("microbatch", "limit"), [(8, 1 << 30), (3, 1 << 30), ("auto", 2)])
def test_stream_id_never_reaches_the_model_and_steps_are_unchanged(microbatch, limit):
    batches = mixture_batches(2)
    ref = tiny_model()
    make_trainer(ref, loader=without_streams(batches), max_steps=2, stream_names=None).fit()
    model = _NoStreamId(tiny_model(), limit=limit)
    tr = make_trainer(model, loader=batches, microbatch=microbatch, max_steps=2)
    tr.fit()
    if microbatch == "auto":
        assert tr.state.microbatch_size == 2 and model.seen[:2] == [8, 4]
    for a, b in zip(_params(ref), _params(model.inner)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def _gpt2(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16))


@pytest.mark.parametrize("build", [tiny_model, _gpt2], ids=["mpt", "hf-gpt2"])
def test_eval_reports_the_mixture_and_each_stream(build):
    model = _NoStreamId(build())
    evals = mixture_batches(3, seed=7)
    mixture = make_trainer(model, loader=[], eval_loader=evals).evaluate()
    plain = make_trainer(model, loader=[], eval_loader=without_streams(evals), stream_names=None).evaluate()
    assert mixture["eval/loss"] == plain["eval/loss"]  # the mixture's loss is exactly today's
    assert mixture["eval/perplexity"] == plain["eval/perplexity"]
    assert set(mixture) == {"eval/loss", "eval/perplexity"} | {
        f"eval/{n}/{m}" for n in NAMES[:2] for m in ("loss", "perplexity")
    }  # the third stream has no eval rows: no metric rather than a made-up 0
    tokens = [
        int(sum((b["labels"][b["stream_id"] == s][:, 1:] != -100).sum() for b in evals)) for s in (0, 1)
    ]
    recombined = sum(mixture[f"eval/{n}/loss"] * t for n, t in zip(NAMES, tokens)) / sum(tokens)
    assert recombined == pytest.approx(mixture["eval/loss"], rel=1e-6)
    for s, name in enumerate(NAMES[:2]):
        alone = make_trainer(model, loader=[], eval_loader=rows_of(evals, s), stream_names=None).evaluate()
        assert mixture[f"eval/{name}/loss"] == pytest.approx(alone["eval/loss"], rel=1e-5)
        assert mixture[f"eval/{name}/perplexity"] == pytest.approx(alone["eval/perplexity"], rel=1e-5)


def test_eval_subset_limits_the_per_stream_metrics_too():
    model = tiny_model()
    evals = mixture_batches(3, seed=7)
    sub = make_trainer(model, loader=[], eval_loader=evals, eval_subset_num_batches=1).evaluate()
    first = make_trainer(model, loader=[], eval_loader=evals[:1]).evaluate()
    assert sub == first


def _expected_counts(batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    out = {}
    for s, name in enumerate(NAMES):
        rows = [b["labels"][b["stream_id"] == s] for b in batches]
        out[f"train/{name}/samples"] = float(sum(r.shape[0] for r in rows))
        out[f"train/{name}/tokens"] = float(sum(int((r[:, 1:] != -100).sum()) for r in rows))
    return out


def test_train_counts_are_logged_at_log_steps_and_in_the_final_metrics():
    batches = mixture_batches(3, streams=3)
    log = ListLogger()
    tr = make_trainer(tiny_model(), loader=batches, microbatch=3, max_steps=3, loggers=[log], log_interval=2)
    final = tr.fit()
    train_rows = [(step, m) for step, m in log.rows if "train/loss" in m]
    assert [step for step, _ in train_rows] == [2, 3]
    for (_, logged), upto in zip(train_rows, (2, 3)):
        assert {k: v for k, v in logged.items() if k.startswith("train/") and k.count("/") == 2} == (
            _expected_counts(batches[:upto])
        )
    assert {k: final[k] for k in _expected_counts(batches)} == _expected_counts(batches)
    assert sum(final[f"train/{n}/samples"] for n in NAMES) == tr.state.samples == 24


def test_counts_resume_from_the_run_state_and_old_checkpoints_still_load():
    batches = mixture_batches(4, streams=3)
    full = make_trainer(tiny_model(), loader=batches, max_steps=4).fit()
    first = make_trainer(tiny_model(), loader=batches, max_steps=2)
    first.fit()
    state = copy.deepcopy(first.state_dict())
    assert state["run"]["streams"]["c4"]["samples"] > 0
    resumed = make_trainer(tiny_model(seed=3), loader=batches[2:], max_steps=4)
    resumed.load_state_dict(state)
    final = resumed.fit()
    assert {k: final[k] for k in _expected_counts(batches)} == {k: full[k] for k in _expected_counts(batches)}

    del state["run"]["streams"]  # a checkpoint written before per-stream counts existed
    old = make_trainer(tiny_model(seed=3), loader=batches[2:], max_steps=4)
    old.load_state_dict(state)
    assert old.fit()["train/c4/samples"] == _expected_counts(batches[2:])["train/c4/samples"]


def test_runs_without_streams_keep_their_state_and_metrics():
    tr = make_trainer(tiny_model(), loader=without_streams(mixture_batches(1)), stream_names=None)
    final = tr.fit()
    assert not any(k.count("/") == 2 for k in final)
    assert set(tr.run_state()) == {"scheduler", "scaler", "state", "dataloader"}


def test_stream_id_without_stream_names_is_a_clear_error():
    tr = make_trainer(tiny_model(), loader=mixture_batches(1), stream_names=None)
    with pytest.raises(ValueError, match=r"Trainer\(stream_names=\[...\]\)"):
        tr.fit()
    tr = make_trainer(tiny_model(), loader=[], eval_loader=mixture_batches(1), stream_names=None)
    with pytest.raises(ValueError, match="no stream_names"):
        tr.evaluate()


def test_ids_beyond_the_names_fail_at_the_next_log_and_in_eval():
    batches = mixture_batches(1, streams=3)
    tr = make_trainer(tiny_model(), loader=batches, stream_names=NAMES[:2])
    with pytest.raises(ValueError, match=r"outside \[0, 2\)"):
        tr.fit()
    tr = make_trainer(tiny_model(), loader=[], eval_loader=batches, stream_names=NAMES[:2])
    with pytest.raises(ValueError, match=r"outside \[0, 2\)"):
        tr.evaluate()
