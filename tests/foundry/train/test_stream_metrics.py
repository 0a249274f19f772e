"""Per-stream metrics: per-row losses against the models' own loss (MPT and transformers), attribution of rows
to streams (property tests), and the validation errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from foundry.models import MPTModelConfig, build_model
from foundry.train.stream_metrics import (
    StreamCounter,
    check_rows,
    check_stream_names,
    model_inputs,
    row_losses,
    stream_eval_metrics,
    stream_matrix,
)


def _labels(ids: torch.Tensor) -> torch.Tensor:
    labels = ids.clone()
    labels[:, -3:] = -100
    labels[0, :6] = -100
    labels[2, :] = -100  # a row without loss tokens
    return labels


def _mpt() -> torch.nn.Module:
    cfg = MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64)
    return build_model(cfg)


def _gpt2() -> torch.nn.Module:
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16))


def _llama() -> torch.nn.Module:
    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=16,
    )
    return LlamaForCausalLM(cfg)


@pytest.mark.parametrize("build", [_mpt, _gpt2, _llama], ids=["mpt", "hf-gpt2", "hf-llama"])
def test_row_losses_reproduce_the_models_own_loss(build):
    torch.manual_seed(0)
    model = build().eval()
    ids = torch.randint(0, 64, (5, 16), generator=torch.Generator().manual_seed(1))
    labels = _labels(ids)
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
    sums, tokens = row_losses(out.logits, labels)
    assert sums.dtype == torch.float64 and tokens.tolist() == (labels[:, 1:] != -100).sum(1).tolist()
    assert sums[2] == 0 and tokens[2] == 0
    torch.testing.assert_close(sums.sum() / tokens.sum(), out.loss.double(), rtol=1e-6, atol=1e-6)
    for row in range(5):  # each row's sum is that row's loss run alone (rows do not interact)
        if tokens[row] == 0:
            continue
        with torch.no_grad():
            alone = model(input_ids=ids[row : row + 1], labels=labels[row : row + 1]).loss
        torch.testing.assert_close(sums[row] / tokens[row], alone.double(), rtol=1e-5, atol=1e-5)


def test_row_losses_do_not_depend_on_the_chunking():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 7, 11, generator=g)
    labels = _labels(torch.randint(0, 11, (5, 7), generator=g))
    whole = row_losses(logits, labels)
    for max_elements in (1, 66, 67, 200):  # one row per chunk, ..., two rows per chunk
        chunked = row_losses(logits, labels, max_elements=max_elements)
        torch.testing.assert_close(chunked[0], whole[0], rtol=0, atol=0)
        assert chunked[1].tolist() == whole[1].tolist()


@settings(max_examples=50, deadline=None)
@given(
    ids=st.lists(st.integers(0, 3), min_size=1, max_size=20),
    values=st.data(),
)
def test_stream_matrix_attributes_every_row_to_exactly_its_stream(ids, values):
    k = 4
    vals = torch.tensor(values.draw(st.lists(st.integers(0, 100), min_size=len(ids), max_size=len(ids))))
    member = stream_matrix(torch.tensor(ids), k)
    assert member.shape == (len(ids), k) and member.sum(1).tolist() == [1] * len(ids)
    per_stream = (member.long() * vals[:, None]).sum(0)
    assert per_stream.tolist() == [sum(v for i, v in zip(ids, vals.tolist()) if i == s) for s in range(k)]
    assert int(per_stream.sum()) == int(vals.sum())


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-3, 7), min_size=1, max_size=20))
def test_out_of_range_ids_match_no_stream(ids):
    member = stream_matrix(torch.tensor(ids), 4)
    assert int(member.sum()) == sum(0 <= i < 4 for i in ids)


def test_counter_counts_rows_and_loss_tokens_per_stream():
    counter = StreamCounter(["a", "b", "c"], device=torch.device("cpu"))
    labels = torch.zeros(4, 6, dtype=torch.long)
    labels[1, :3] = -100  # 5 - 2 = 3 loss tokens
    counter.add(torch.tensor([0, 2, 2, 0]), labels)
    counter.add(torch.tensor([2, 2, 2, 2]), labels)
    assert counter.metrics() == {}  # nothing flushed yet
    counter.flush()
    assert counter.state_dict() == {
        "a": {"samples": 2, "tokens": 10},
        "b": {"samples": 0, "tokens": 0},
        "c": {"samples": 6, "tokens": 5 + 3 + 5 + 5 + 3 + 5},
    }
    assert counter.metrics()["train/b/samples"] == 0.0 and counter.metrics()["train/c/tokens"] == 26.0


def test_counter_resumes_by_name_and_keeps_removed_streams():
    counter = StreamCounter(["a", "new"], device=torch.device("cpu"))
    counter.load_state_dict({"a": {"samples": 5, "tokens": 50}, "gone": {"samples": 2, "tokens": 9}})
    counter.add(torch.tensor([0, 1]), torch.zeros(2, 4, dtype=torch.long))
    counter.flush()
    assert counter.state_dict() == {
        "a": {"samples": 6, "tokens": 53},
        "new": {"samples": 1, "tokens": 3},
        "gone": {"samples": 2, "tokens": 9},
    }


def test_counter_flush_rejects_ids_outside_the_names():
    counter = StreamCounter(["a", "b"], device=torch.device("cpu"))
    counter.add(torch.tensor([0, 5]), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"1 of 2 rows have a 'stream_id' outside \[0, 2\)"):
        counter.flush()


def test_check_rows_passes_when_all_rows_matched():
    check_rows(4.0, 4.0, ["a"])


@pytest.mark.parametrize(
    ("names", "match"),
    [([], "empty"), (["a", "a"], "duplicates"), (["c4/en"], "without '/'"), ([""], "non-empty")],
)
def test_stream_names_are_validated(names, match):
    with pytest.raises(ValueError, match=match):
        check_stream_names(names)


def test_stream_eval_metrics_skip_streams_without_tokens():
    out = stream_eval_metrics(["a", "b"], [6.0, 0.0], [3.0, 0.0])
    assert out == {"eval/a/loss": 2.0, "eval/a/perplexity": pytest.approx(7.389056, rel=1e-6)}


def test_model_inputs_drops_only_stream_id():
    batch = {"input_ids": torch.zeros(2, 3), "labels": torch.zeros(2, 3)}
    assert model_inputs(batch) is batch
    assert set(model_inputs({**batch, "stream_id": torch.zeros(2)})) == {"input_ids", "labels"}
