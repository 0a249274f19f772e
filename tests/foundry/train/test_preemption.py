"""Preemption in the trainer: a signal stops the run at the next step boundary, handlers are restored."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from foundry.callbacks.base import Callback
from foundry.train.config import TrainerConfig
from foundry.train.preemption import (
    INTERRUPT_EXIT_CODE,
    REQUEUE_EXIT_CODE,
    Interrupted,
    Preempted,
    PreemptionWatch,
    shield_workers,
)
from tests.foundry.train.test_loop import _batches, _model, _trainer


class _SignalAt(Callback):
    """Sends `sig` to this process at the end of step `at`; records what the trainer showed each step."""

    def __init__(self, sig: int, at: int) -> None:
        self.sig, self.at = sig, at
        self.seen: list[tuple[int, bool]] = []
        self.handler_during_fit: object = None

    def on_step_end(self, trainer, *, step_seconds: float) -> dict[str, float]:
        self.seen.append((trainer.state.step, trainer.stop_requested))
        self.handler_during_fit = signal.getsignal(signal.SIGTERM)
        if trainer.state.step == self.at:
            os.kill(os.getpid(), self.sig)
        return {}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signal_stops_at_the_next_step_boundary_and_handlers_are_restored(sig, capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    cb = _SignalAt(sig, at=3)
    trainer = _trainer(_model(), microbatch=8, loader=_batches(10), max_steps=10)
    trainer.callbacks.append(cb)
    with pytest.raises(Preempted) as info:
        trainer.fit()
    assert info.value.code == REQUEUE_EXIT_CODE == 75
    assert info.value.step == 4 and trainer.state.step == 4
    assert info.value.signal_name == signal.Signals(sig).name
    assert cb.seen == [(1, False), (2, False), (3, False), (4, True)]  # callbacks (the saver) see the stop
    assert cb.handler_during_fit not in (before[signal.SIGTERM],)
    assert {s: signal.getsignal(s) for s in before} == before
    assert "exit code 75 (requeue); rerun the same command to resume" in capsys.readouterr().out


def test_ctrl_c_stops_at_the_next_step_boundary_like_a_preemption_and_exits_130(capsys):
    """Issue 40 item 2: Ctrl-C printed a 22-frame KeyboardInterrupt traceback and, with the default checkpoint
    settings (save at the end), lost the whole run."""
    before = signal.getsignal(signal.SIGINT)
    cb = _SignalAt(signal.SIGINT, at=3)
    trainer = _trainer(_model(), microbatch=8, loader=_batches(10), max_steps=10)
    trainer.callbacks.append(cb)
    with pytest.raises(Preempted) as info:
        trainer.fit()
    assert info.value.code == INTERRUPT_EXIT_CODE == 130 and info.value.signal_name == "SIGINT"
    assert cb.seen[-1] == (4, True)  # the checkpoint callback sees the stop, as for a preemption
    assert signal.getsignal(signal.SIGINT) == before
    assert "interrupted (Ctrl-C) at step 4" in capsys.readouterr().out


def test_a_second_ctrl_c_stops_at_once_without_a_traceback(capsys):
    with PreemptionWatch(30, device=torch.device("cpu")) as watch:
        os.kill(os.getpid(), signal.SIGINT)
        assert watch.should_stop()
        with pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs at the next bytecode
    assert info.value.code == 130 and isinstance(info.value, SystemExit)
    assert "interrupted again (Ctrl-C): stopped at once" in capsys.readouterr().err


def test_grace_zero_installs_no_handler():
    cb = _SignalAt(signal.SIGTERM, at=-1)
    before = signal.getsignal(signal.SIGTERM)
    trainer = _trainer(_model(), microbatch=8, loader=_batches(2), max_steps=2, preemption_grace=0)
    trainer.callbacks.append(cb)
    trainer.fit()
    assert cb.handler_during_fit == before
    assert [stop for _, stop in cb.seen] == [False, False]


def test_watch_warns_when_stopping_took_longer_than_the_grace(capsys):
    with PreemptionWatch(1e-9, device=torch.device("cpu")) as watch:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert watch.should_stop()
        err = watch.stop(7)
    assert err.step == 7 and err.signal_name == "SIGUSR1"
    assert "more than trainer.preemption_grace" in capsys.readouterr().out
    assert not watch.active


def test_negative_grace_is_a_config_error():
    with pytest.raises(ValueError, match="trainer.preemption_grace"):
        TrainerConfig(preemption_grace=-1)


class _Endless(IterableDataset):
    def __iter__(self):
        i = 0
        while True:
            time.sleep(0.001)
            yield torch.tensor([i])
            i += 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_shielded_workers_survive_sigterm(sig):
    """torch's worker SIGTERM handler would exit the worker (and fail the rank's next batch); a terminal's
    Ctrl-C reaches the workers too (one process group), and a worker ends on KeyboardInterrupt."""
    loader = DataLoader(_Endless(), batch_size=2, num_workers=1, persistent_workers=True)
    shield_workers(loader, None, [])
    shield_workers(loader)  # idempotent: chained once
    assert loader.worker_init_fn.keywords["previous"] is None
    it = iter(loader)
    next(it)
    (worker,) = it._workers
    os.kill(worker.pid, sig)
    time.sleep(0.3)
    for _ in range(5):
        next(it)
    assert worker.is_alive()
    it._shutdown_workers()
