"""Demand boards (``streaming.cache.demand``): what each reader sharing a cache reads next, and eviction that
keeps the shards another reader is about to open."""

from __future__ import annotations

import json
import multiprocessing
import os

from hypothesis import given
from hypothesis import strategies as st

from streaming.cache import space
from streaming.cache.demand import DEMAND, MAX_SHARDS, DemandBoard, merge_demand
from streaming.cache.locks import lock_dir


@given(st.lists(st.dictionaries(st.integers(0, 20), st.integers(0, 1000), max_size=8), max_size=4))
def test_merge_takes_each_shards_nearest_use(boards):
    merged = merge_demand({str(i): b for i, b in enumerate(boards)})
    assert set(merged) == {k for b in boards for k in b}
    for k, position in merged.items():
        assert position == min(b[k] for b in boards if k in b)


def test_a_reader_sees_the_other_boards_not_its_own(tmp_path):
    locks = lock_dir(str(tmp_path))
    mine, theirs, third = DemandBoard(locks), DemandBoard(locks), DemandBoard(locks)
    mine.publish({1: 0, 2: 5})
    theirs.publish({2: 3, 3: 9})
    third.publish({3: 4})
    assert mine.others() == {2: 3, 3: 4}
    assert theirs.others() == {1: 0, 2: 5, 3: 4}
    theirs.publish({7: 1})  # republished: read again
    assert mine.others() == {7: 1, 3: 4}
    theirs.close()
    assert mine.others() == {3: 4}
    assert sorted(os.listdir(mine.folder)) == sorted(
        n for n in os.listdir(mine.folder) if not n.endswith(".part")
    )


def test_a_board_names_only_the_nearest_shards(tmp_path):
    locks = lock_dir(str(tmp_path))
    mine, other = DemandBoard(locks), DemandBoard(locks)
    other.publish({k: 10 * (2 * MAX_SHARDS - k) for k in range(2 * MAX_SHARDS)})
    seen = mine.others()
    assert len(seen) == MAX_SHARDS and min(seen) == MAX_SHARDS and seen[2 * MAX_SHARDS - 1] == 10


def test_boards_of_dead_processes_are_deleted_and_bad_ones_skipped(tmp_path):
    locks = lock_dir(str(tmp_path))
    board = DemandBoard(locks)
    board.publish({0: 0})
    folder = board.folder
    proc = multiprocessing.get_context("fork").Process(target=os.getpid)
    proc.start()
    proc.join()
    dead = os.path.join(folder, f"{proc.pid}-x.json")
    with open(dead, "w") as f:
        json.dump({"uses": [5, 0]}, f)
    alive = os.getpid()
    bad = {
        "not-json": "{",
        "odd": json.dumps({"uses": [1, 2, 3]}),
        "negative": json.dumps({"uses": [1, -2]}),
        "floats": json.dumps({"uses": [1.0, 2]}),
        "no-uses": json.dumps({"other": []}),
        "huge": json.dumps({"uses": [1, 2], "pad": "x" * 70_000}),
    }
    for name, text in bad.items():
        with open(os.path.join(folder, f"{alive}-{name}.json"), "w") as f:
            f.write(text)
    target = os.path.join(str(tmp_path), "elsewhere.json")
    with open(target, "w") as f:
        json.dump({"uses": [9, 0]}, f)
    os.symlink(target, os.path.join(folder, f"{alive}-link.json"))
    assert DemandBoard(locks).others() == {0: 0}
    assert not os.path.exists(dead)


def _child(board: DemandBoard, conn) -> None:
    board.publish({2: 0})
    conn.send(sorted(os.listdir(board.folder)))


def test_a_forked_child_publishes_its_own_board(tmp_path):
    board = DemandBoard(lock_dir(str(tmp_path)))
    board.publish({1: 5})
    parent, child = multiprocessing.get_context("fork").Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(board, child))
    proc.start()
    names = parent.recv()
    proc.join()
    assert len(names) == 2, "the child wrote beside the parent's board, not over it"
    assert json.load(open(os.path.join(board.folder, board._own_name())))["uses"] == [1, 5]


def test_eviction_keeps_what_another_reader_opens_next(tmp_path):
    """The shard this reader will not use again but another job opens next stays; one nobody wants goes."""
    folder = str(tmp_path)
    paths = [os.path.join(folder, f"shard.{k:05d}.mds") for k in range(3)]
    for path in paths[:2]:
        with open(path, "wb") as f:
            f.write(b"x" * 1000)
    os.utime(paths[1], (1, 1))  # shard 1 is the older: least recently used would evict it
    entries = {
        k: space.SpaceEntry(local=folder, lock_name=os.path.basename(p), paths=(p,))
        for k, p in enumerate(paths)
    }
    keeper = space.SpaceKeeper(folder, entries, 2000, 1.0)
    other_job = DemandBoard(lock_dir(folder))
    other_job.publish({1: 3})
    token = keeper.reserve(2, 1000, [paths[2]], name="shard 2", next_use=lambda k: float("inf"), patience=0)
    assert token is not None
    assert os.path.exists(paths[1]) and not os.path.exists(paths[0])
    space.release_reservation(token)
    assert os.listdir(os.path.join(lock_dir(folder), DEMAND)) != []


def test_a_prefetch_evicts_nothing_another_reader_needs_sooner(tmp_path):
    folder = str(tmp_path)
    paths = [os.path.join(folder, f"shard.{k:05d}.mds") for k in range(3)]
    for path in paths[:2]:
        with open(path, "wb") as f:
            f.write(b"x" * 1000)
    entries = {
        k: space.SpaceEntry(local=folder, lock_name=os.path.basename(p), paths=(p,))
        for k, p in enumerate(paths)
    }
    keeper = space.SpaceKeeper(folder, entries, 2000, 1.0)
    DemandBoard(lock_dir(folder)).publish({0: 2, 1: 4})
    own = {0: 50, 1: 60, 2: 5}
    kwargs = dict(name="shard 2", next_use=own.__getitem__, patience=0, ahead=True)
    assert keeper.reserve(2, 1000, [paths[2]], **kwargs) is None, "both are needed (elsewhere) before 5"
    own[2] = 3
    assert keeper.reserve(2, 1000, [paths[2]], **kwargs) is not None
    assert os.path.exists(paths[0]) and not os.path.exists(paths[1]), "shard 1 (needed at 4) went"
