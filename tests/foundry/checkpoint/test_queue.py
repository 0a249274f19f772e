"""`UploadQueue`: one job in flight, only the newest waits, failures reach the training thread."""

from __future__ import annotations

import threading

import pytest

from foundry.checkpoint.queue import UploadQueue


def test_the_newest_job_replaces_the_waiting_one_and_the_replaced_one_is_dropped():
    gate, started = threading.Event(), threading.Event()
    ran: list[int] = []
    dropped: list[int] = []

    def run(job: int) -> None:
        started.set()
        if job == 1:
            gate.wait(10)
        ran.append(job)

    q: UploadQueue[int] = UploadQueue(run, dropped.append)
    assert q.submit(1) is None
    assert started.wait(10)
    assert q.submit(2) is None  # waits behind 1
    assert q.submit(3) == 2  # replaces 2
    assert q.submit(4) == 3
    assert not q.idle
    gate.set()
    q.close()
    assert ran == [1, 4] and dropped == [2, 3] and q.dropped_count == 2


def test_a_failure_is_raised_on_the_next_call_and_nothing_more_runs():
    ran: list[int] = []

    def run(job: int) -> None:
        if job == 1:
            raise OSError("store down: budget spent")
        ran.append(job)

    q: UploadQueue[int] = UploadQueue(run, lambda j: None)
    q.submit(1)
    with pytest.raises(OSError, match="budget spent"):
        q.wait()
    with pytest.raises(OSError, match="budget spent"):  # every later call says so; nothing more runs
        q.submit(2)
    q.close()  # already reported: closes quietly
    assert ran == []


def test_close_raises_a_failure_nobody_saw():
    q: UploadQueue[int] = UploadQueue(lambda j: (_ for _ in ()).throw(OSError("down")), lambda j: None)
    q.submit(1)
    with pytest.raises(OSError, match="down"):
        q.close()


def test_wait_returns_once_everything_is_published_or_dropped():
    q: UploadQueue[int] = UploadQueue(lambda j: None, lambda j: None)
    for i in range(20):
        q.submit(i)
    q.wait()
    assert q.idle
    q.close()
