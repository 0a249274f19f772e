"""`trainer.token_counting`: `padded` counts batch x row length (the default); `non_pad` counts the tokens
where `attention_mask` is 1, as Composer/llm-foundry do (`get_num_tokens_in_batch`), and a resumed run
continues that count."""

from __future__ import annotations

import copy

import pytest
import torch

from foundry.train.config import TrainerConfig
from tests.foundry.train.test_loop import _model, _trainer


def _padded_batches(n: int) -> list[dict[str, torch.Tensor]]:
    """Batches of 8 rows x 16 with the first `i % 5` positions of row i padding (mask 0, label -100)."""
    g = torch.Generator().manual_seed(3)
    out = []
    for _ in range(n):
        ids = torch.randint(0, 64, (8, 16), generator=g)
        mask = torch.ones(8, 16, dtype=torch.long)
        for i in range(8):
            mask[i, : i % 5] = 0
        labels = ids.masked_fill(mask == 0, -100)
        out.append({"input_ids": ids, "labels": labels, "attention_mask": mask})
    return out


REAL = 8 * 16 - sum(i % 5 for i in range(8))  # 128 - 14 = 114 real tokens per batch


@pytest.mark.parametrize(("counting", "per_step"), [("padded", 8 * 16), ("non_pad", REAL)])
def test_tokens_per_step(counting: str, per_step: int) -> None:
    batches = _padded_batches(3)
    tr = _trainer(_model(), microbatch=4, loader=batches, max_steps=3, token_counting=counting)
    tr.fit()
    assert tr.state.tokens == 3 * per_step and tr.state.samples == 24


def test_resumed_run_continues_the_non_pad_count() -> None:
    batches = _padded_batches(4)
    a = _trainer(_model(), microbatch=4, loader=batches, max_steps=2, token_counting="non_pad")
    a.fit()
    state = copy.deepcopy(a.state_dict())
    b = _trainer(_model(seed=9), microbatch=4, loader=batches[2:], max_steps=4, token_counting="non_pad")
    b.load_state_dict(state)
    assert b.state.tokens == 2 * REAL
    b.fit()
    assert b.state.tokens == 4 * REAL


def test_without_a_mask_every_token_counts() -> None:
    batches = [{k: v for k, v in b.items() if k != "attention_mask"} for b in _padded_batches(1)]
    tr = _trainer(_model(), microbatch=8, loader=batches, max_steps=1, token_counting="non_pad")
    tr.fit()
    assert tr.state.tokens == 8 * 16


def test_bad_values_are_one_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"trainer.token_counting='nonpad': use padded or non_pad"):
        TrainerConfig(token_counting="nonpad")
    with pytest.raises(ValueError, match=r"max_duration=1e6tok with trainer.token_counting=non_pad"):
        TrainerConfig(token_counting="non_pad", max_duration="1e6tok")
    assert TrainerConfig().token_counting == "padded"
