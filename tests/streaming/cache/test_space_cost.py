"""What keeps a cache limit cheap (``streaming.cache.space``, "Cost") without changing what it decides: the threads
of a process share one descriptor of the cache lock and still exclude every other holder (another process, a
forked child), reservation files are parsed once, and the victims' ages come from the scan."""

from __future__ import annotations

import multiprocessing
import os

from streaming.cache import space
from streaming.cache.locks import file_lock, lock_dir


def _keeper(folder: str, n: int, limit: int) -> tuple[space.SpaceKeeper, list[str]]:
    names = [f"shard.{k:05d}.mds" for k in range(n)]
    paths = [os.path.join(folder, name) for name in names]
    entries = {k: space.SpaceEntry(local=folder, lock_name=names[k], paths=(paths[k],)) for k in range(n)}
    return space.SpaceKeeper(folder, entries, limit, 1.0), paths


def _reserve_in_child(keeper: space.SpaceKeeper, path: str, out: str) -> None:
    token = keeper.reserve(1, 10, [path], name="shard.00001.mds", patience=0)
    with open(out, "w") as f:
        f.write(str(token is not None))


def test_a_forked_child_waits_for_the_cache_lock_its_parent_holds(tmp_path):
    """The parent opened its descriptor of the cache lock (a first reservation) and holds the lock; a child forked
    then must not take the lock through the inherited descriptor (it would share the parent's lock): it waits."""
    folder = str(tmp_path)
    keeper, paths = _keeper(folder, 2, 1000)
    first = keeper.reserve(0, 10, [paths[0]], name="shard.00000.mds", patience=0)
    assert first is not None
    space.release_reservation(first)
    out = str(tmp_path / "child.txt")
    child = multiprocessing.get_context("fork").Process(
        target=_reserve_in_child, args=(keeper, paths[1], out)
    )
    with keeper._lock.hold():
        child.start()
        child.join(1.0)
        blocked = child.is_alive() and not os.path.exists(out)
    child.join(30)
    assert blocked, "the child took the cache lock its parent held"
    assert child.exitcode == 0 and open(out).read() == "True"


def test_another_holder_of_the_cache_lock_keeps_every_thread_out(tmp_path):
    """A holder with its own descriptor (another process, as ``file_lock`` opens one) excludes this process's
    threads: the reservation waits for it and then succeeds."""
    import threading

    folder = str(tmp_path)
    keeper, paths = _keeper(folder, 2, 1000)
    got: list[str | None] = []
    with file_lock(folder, "cache"):
        t = threading.Thread(
            target=lambda: got.append(keeper.reserve(0, 10, [paths[0]], name="s", patience=0))
        )
        t.start()
        t.join(1.0)
        waited = t.is_alive() and not got
    t.join(30)
    assert waited, "a reservation was made while another holder had the cache lock"
    assert got and got[0] is not None


def test_reservations_are_parsed_once_and_forgotten_when_released(tmp_path):
    folder = str(tmp_path)
    locks = lock_dir(folder)
    known: dict[str, space.Reservation] = {}
    token = space.add_reservation(locks, 500, [os.path.join(folder, "a")])
    (first,) = space.read_reservations(locks, known=known)
    assert first.nbytes == 500 and set(known) == {os.path.basename(token)}
    with open(token, "w") as f:  # a reservation never changes once written: the parsed one is used
        f.write("{}")
    assert space.read_reservations(locks, known=known) == [first]
    space.release_reservation(token)
    assert space.read_reservations(locks, known=known) == [] and known == {}


def test_the_oldest_idle_shard_goes_first_by_the_scans_own_times(tmp_path):
    folder = str(tmp_path)
    keeper, paths = _keeper(folder, 4, 350)
    for k, age in ((0, 300), (1, 100), (2, 200)):  # shard 0 written last, shard 1 first
        with open(paths[k], "wb") as f:
            f.write(b"x" * 100)
        os.utime(paths[k], (1_000_000 + age, 1_000_000 + age))
    usage = space.scan_usage(keeper._by_dir)
    assert usage.mtimes[paths[1]] == 1_000_100
    token = keeper.reserve(3, 100, [paths[3]], name="shard.00003.mds", patience=0)
    assert token is not None
    # 300 + 100 > 350: the oldest (shard 1) goes, not the others
    assert [os.path.exists(p) for p in paths[:3]] == [True, False, True]


def test_the_lock_folder_removed_by_hand_is_made_again(tmp_path):
    """The descriptor kept open and the folder checked once do not outlive the lock folder: a reservation after
    it is removed records itself in a new one, under the lock file every other process now opens."""
    import shutil

    folder = str(tmp_path / "cache")
    os.makedirs(folder)
    keeper, paths = _keeper(folder, 2, 1000)
    space.release_reservation(keeper.reserve(0, 10, [paths[0]], name="a", patience=0) or "")
    shutil.rmtree(lock_dir(folder))
    token = keeper.reserve(1, 10, [paths[1]], name="b", patience=0)
    assert token is not None and os.path.exists(token)
    with file_lock(folder, "cache", blocking=False) as free:  # the new lock file, as another process opens it
        assert free
