"""The spike guard: robust z-scores (properties), NaN rollback that equals a run without the bad batch, stops."""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import dataclass

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from foundry.models import MPTModelConfig, build_model
from foundry.train.batching import plan_batches
from foundry.train.config import TrainerConfig
from foundry.train.loop import Trainer
from foundry.train.spike_guard import SpikeGuardConfig, SpikeGuardError, robust_z, spike_reason
from tests.foundry.train.test_loop import _batches

POISON = 63  # a token id: a batch starting with it gets a NaN loss from `_Poisonable`
OUTLIER = 62  # ... and with this one a finite loss 20 times too high


@dataclass
class _Out:
    loss: torch.Tensor


class _Poisonable(torch.nn.Module):
    """The tiny MPT, whose loss is NaN on batches whose first token is `POISON` (an injected bad batch)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        cfg = MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64)
        self.inner = build_model(cfg)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor, **kw: torch.Tensor) -> _Out:
        loss = self.inner(input_ids=input_ids, labels=labels, **kw).loss
        if bool((input_ids[:, 0] == POISON).any()):
            loss = loss * float("nan")
        if bool((input_ids[:, 0] == OUTLIER).any()):
            loss = loss * 20.0
        return _Out(loss)


class _Loader:
    """A list of batches with a resumable position (`state_dict`), like the real train loader."""

    def __init__(self, batches: list[dict[str, torch.Tensor]]) -> None:
        self.batches, self.pos = batches, 0

    def __iter__(self):
        while self.pos < len(self.batches):
            self.pos += 1
            yield self.batches[self.pos - 1]

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.pos = state["pos"]


class _Log:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.rows.append((step, dict(metrics)))

    def close(self) -> None:
        pass


def _run(
    batches,
    *,
    steps: int,
    guard: SpikeGuardConfig,
    log: _Log | None = None,
    resume: dict | None = None,
    setup=None,
) -> Trainer:
    """Trains the poisonable model on `batches`; `setup(trainer)` runs before `fit` (e.g. adds checkpoints)."""
    model = _Poisonable()
    cfg = TrainerConfig(
        global_train_batch_size=8,
        device_train_microbatch_size=4,
        device="cpu",
        progress_bar=False,
        precision="fp32",
        grad_clip_norm=1.0,
        spike_guard=guard,
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    trainer = Trainer(
        model=model,
        optimizer=opt,
        scheduler=sched,
        train_loader=batches,
        eval_loader=None,
        cfg=cfg,
        plan=plan_batches(global_batch_size=8, world_size=1, microbatch=4),
        max_steps=steps,
        eval_interval_steps=0,
        max_seq_len=16,
        device=torch.device("cpu"),
        loggers=[log] if log is not None else None,
    )
    if resume is not None:
        trainer.load_state_dict(copy.deepcopy(resume))
    if setup is not None:
        setup(trainer)
    trainer.fit()
    return trainer


def _clean(n: int) -> list[dict[str, torch.Tensor]]:
    return [b for b in _batches(n + 3) if not bool((b["input_ids"][:, 0] >= OUTLIER).any())][:n]


def _poisoned(batches, *at: int, token: int = POISON):
    out = [dict(b) for b in batches]
    for k in at:
        ids = out[k]["input_ids"].clone()
        ids[0, 0] = token
        out[k] = {**out[k], "input_ids": ids}
    return out


def test_nan_batch_is_skipped_and_the_run_equals_one_without_it():
    batches = _clean(8)
    guard = SpikeGuardConfig(enabled=True, snapshot_interval=1, min_history=2, window=4)
    log = _Log()
    guarded = _run(_poisoned(batches, 3), steps=7, guard=guard, log=log)
    reference = _run(batches[:3] + batches[4:], steps=7, guard=SpikeGuardConfig())
    assert guarded.guard is not None and guarded.guard.skipped == [3]
    assert guarded.state.step == 7 and guarded.state.samples == reference.state.samples
    for (name, a), b in zip(guarded.model.state_dict().items(), reference.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert guarded.scheduler.state_dict() == reference.scheduler.state_dict()
    events = [(step, m) for step, m in log.rows if "spike_guard/rollbacks" in m]
    assert len(events) == 1
    step, m = events[0]
    assert step == 3 and m["spike_guard/skipped_first_batch"] == m["spike_guard/skipped_last_batch"] == 3
    assert guarded.run_state()["spike_guard"]["skipped"] == [3]


def test_snapshot_interval_skips_the_batches_since_the_snapshot():
    batches = _clean(10)
    guard = SpikeGuardConfig(enabled=True, snapshot_interval=4, min_history=2, window=4)
    guarded = _run(_poisoned(batches, 6), steps=7, guard=guard)
    assert guarded.guard is not None and guarded.guard.skipped == [4, 5, 6]  # snapshot after step 4
    reference = _run(batches[:4] + batches[7:], steps=7, guard=SpikeGuardConfig())
    for a, b in zip(guarded.model.state_dict().values(), reference.model.state_dict().values()):
        assert torch.equal(a, b)


def test_an_outlier_loss_is_a_spike_by_robust_z_score(capsys):
    batches = _clean(8)
    guard = SpikeGuardConfig(enabled=True, snapshot_interval=1, min_history=3, window=5)
    guarded = _run(_poisoned(batches, 5, token=OUTLIER), steps=7, guard=guard)
    assert guarded.guard is not None and guarded.guard.skipped == [5]
    assert "robust z-scores above the median" in capsys.readouterr().out
    reference = _run(batches[:5] + batches[6:], steps=7, guard=SpikeGuardConfig())
    for a, b in zip(guarded.model.state_dict().values(), reference.model.state_dict().values()):
        assert torch.equal(a, b)


def test_a_resume_with_the_guard_continues_exactly():
    """A checkpoint holds the guard's window and skip list; a rerun from it rolls back alike."""
    batches = _poisoned(_clean(9), 6)
    guard = SpikeGuardConfig(enabled=True, snapshot_interval=1, min_history=2, window=4)
    whole = _run(_Loader(batches), steps=8, guard=guard)
    first = _run(_Loader(batches), steps=4, guard=guard)
    saved = first.state_dict()
    assert saved["run"]["spike_guard"]["drawn"] == 4
    resumed = _run(_Loader(batches), steps=8, guard=guard, resume=saved)
    assert resumed.guard is not None and whole.guard is not None
    assert resumed.guard.skipped == whole.guard.skipped == [6]
    assert resumed.guard.state_dict() == whole.guard.state_dict()
    for a, b in zip(resumed.model.state_dict().values(), whole.model.state_dict().values()):
        assert torch.equal(a, b)


def test_a_step_that_keeps_spiking_stops_with_a_report():
    batches = _batches(10)
    guard = SpikeGuardConfig(enabled=True, snapshot_interval=1, min_history=2, window=4, retries_per_step=1)
    with pytest.raises(
        SpikeGuardError, match=r"step 3 spiked again after 1 rollback.*batches skipped so far: 2"
    ):
        _run(_poisoned(batches, 2, 3), steps=6, guard=guard)


def test_max_rollbacks_stops_the_run():
    guard = SpikeGuardConfig(enabled=True, snapshot_interval=1, min_history=2, window=4, max_rollbacks=1)
    with pytest.raises(SpikeGuardError, match="max_rollbacks=1"):
        _run(_poisoned(_batches(10), 1, 4), steps=6, guard=guard)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="spike_guard.min_history"):
        SpikeGuardConfig(window=5, min_history=6)
    with pytest.raises(ValueError, match="spike_guard.snapshot_interval"):
        SpikeGuardConfig(snapshot_interval=0)


def test_spike_reason_catches_nan_inf_and_outliers():
    cfg = SpikeGuardConfig(min_history=3, window=10, z_threshold=6.0)
    hist = [3.0, 3.1, 2.9, 3.05, 2.95]
    assert spike_reason(float("nan"), 1.0, hist, cfg) == "loss is nan"
    assert spike_reason(3.0, float("inf"), hist, cfg) == "gradient norm is inf"
    assert spike_reason(3.2, 1.0, hist, cfg) is None
    assert "robust z-scores" in (spike_reason(9.0, 1.0, hist, cfg) or "")
    assert spike_reason(9.0, 1.0, hist[:2], cfg) is None  # too little history for the z-score
    assert spike_reason(0.1, 1.0, hist, cfg) is None  # only upward outliers


finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=30), finite, st.floats(min_value=0.1, max_value=10))
def test_robust_z_is_scale_invariant_and_zero_or_below_at_the_median(hist, value, scale):
    assume(abs(statistics.median(hist)) > 1e-6)  # else the absolute 1e-12 floor of the scale binds
    z = robust_z(hist, value)
    assert math.isfinite(z)
    assert robust_z([x * scale for x in hist], value * scale) == pytest.approx(z, rel=1e-6, abs=1e-9)
    assert robust_z(hist, statistics.median(hist)) == 0.0
    if value <= statistics.median(hist):
        assert z <= 0


@given(st.lists(finite, min_size=1, max_size=30), finite, finite)
def test_robust_z_is_monotone_in_the_value(hist, a, b):
    lo, hi = min(a, b), max(a, b)
    assert robust_z(hist, lo) <= robust_z(hist, hi)
