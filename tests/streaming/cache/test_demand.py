"""Demand boards (``streaming.cache.demand``): what each reader sharing a cache reads next, and eviction that
keeps the shards another reader is about to open."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.cache import space
from streaming.cache.demand import (
    DEMAND,
    MAX_SHARDS,
    DemandBoard,
    board_bytes,
    merge_demand,
    parse_board,
    shifted,
)
from streaming.cache.locks import lock_dir
from streaming.util.safepath import UnsafePathError


@given(st.lists(st.dictionaries(st.integers(0, 20), st.integers(0, 1000), max_size=8), max_size=4))
def test_merge_takes_each_shards_nearest_use(boards):
    merged = merge_demand({str(i): b for i, b in enumerate(boards)})
    assert set(merged) == {k for b in boards for k in b}
    for k, position in merged.items():
        assert position == min(b[k] for b in boards if k in b)


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 100), st.integers(0, 100)), max_size=10),
    st.integers(0, 120),
)
def test_a_board_moves_along_with_its_reader(triples, behind):
    uses = [(shard, min(a, b), max(a, b)) for shard, a, b in triples]
    got = shifted(uses, behind)
    for shard, first, last in uses:
        if last < behind:
            continue  # read past: no claim
        assert got[shard] <= max(0, first - behind)
    assert set(got) == {shard for shard, _, last in uses if last >= behind}
    assert shifted(uses, 0) == merge_demand({str(i): {s: f} for i, (s, f, _) in enumerate(uses)})


def spans(d: dict[int, int]) -> dict[int, tuple[int, int]]:
    return {k: (v, v + 10) for k, v in d.items()}


def test_a_reader_sees_the_other_boards_not_its_own(tmp_path):
    locks = lock_dir(str(tmp_path))
    mine, theirs, third = DemandBoard(locks), DemandBoard(locks), DemandBoard(locks)
    mine.publish(spans({1: 0, 2: 5}), 0)
    theirs.publish(spans({2: 3, 3: 9}), 100)
    third.publish(spans({3: 4}), 0)
    assert mine.others() == {2: 3, 3: 4}
    assert theirs.others() == {1: 0, 2: 5, 3: 4}
    theirs.progress(105)  # 5 samples on: shard 2's first sample (3) is behind it, its last (13) is not
    assert mine.others() == {2: 0, 3: 4}
    theirs.progress(114)  # past shard 2 (3..13); shard 3 (9..19) in use
    assert mine.others() == {3: 0}
    theirs.publish(spans({7: 1}), 200)  # republished: read again
    assert mine.others(relist=60) == {7: 1, 3: 4}
    later = DemandBoard(locks)
    later.publish(spans({8: 0}), 0)
    assert mine.others(relist=60) == {7: 1, 3: 4, 8: 0}, "a new reader is seen (the roster changed)"
    theirs.close()
    assert mine.others(relist=60) == {3: 4, 8: 0}, "a reader that stops withdraws at once"
    assert mine.others(relist=0) == {3: 4, 8: 0}
    assert not [n for n in os.listdir(mine.folder) if n.endswith(".part")]


def test_a_publish_does_not_make_the_others_list_the_folder_again(tmp_path, monkeypatch):
    """A publish renames a board into the folder, which changed the folder's modification time, so every other
    reader listed the folder again at its next eviction (~0.2 ms under load, at nearly every reservation in the
    cache-pressure benchmark). The folder is now listed again when a reader comes or goes (``ROSTER``)."""
    locks = lock_dir(str(tmp_path))
    mine, theirs = DemandBoard(locks), DemandBoard(locks)
    mine.publish(spans({1: 0}), 0)
    theirs.publish(spans({2: 3}), 0)
    assert mine.others(relist=60) == {2: 3}
    listings: list[int] = []
    real = DemandBoard._relist
    monkeypatch.setattr(DemandBoard, "_relist", lambda self, *a: listings.append(1) or real(self, *a))
    os.utime(mine.folder, ns=(0, 0))  # so that any change to the folder shows in its time
    for read in (10, 20, 30):
        theirs.publish(spans({5: read}), read)
        assert mine.others(relist=60) == {5: read}, "each new board is read (its version changed)"
    assert listings == []  # was [1, 1, 1]
    newcomer = DemandBoard(locks)
    newcomer.publish(spans({7: 1}), 0)
    assert mine.others(relist=60) == {5: 30, 7: 1} and listings == [1], "a new reader is seen at once"
    newcomer.close()
    assert mine.others(relist=60) == {5: 30} and listings == [1, 1], "one that stops is forgotten at once"
    assert len(mine._others) == 1


def test_a_board_names_only_the_nearest_shards(tmp_path):
    locks = lock_dir(str(tmp_path))
    mine, other = DemandBoard(locks), DemandBoard(locks)
    other.publish(spans({k: 10 * (2 * MAX_SHARDS - k) for k in range(2 * MAX_SHARDS)}), 0)
    seen = mine.others()
    assert len(seen) == MAX_SHARDS and min(seen) == MAX_SHARDS and seen[2 * MAX_SHARDS - 1] == 10


def test_boards_of_dead_processes_are_deleted_and_bad_ones_skipped(tmp_path):
    locks = lock_dir(str(tmp_path))
    board = DemandBoard(locks)
    board.publish(spans({0: 0}), 0)
    folder = board.folder
    proc = multiprocessing.get_context("fork").Process(target=os.getpid)
    proc.start()
    proc.join()
    token = "0" * 32
    dead = [os.path.join(folder, f"{proc.pid}-{token}.{suffix}") for suffix in ("json", "pos")]
    with open(dead[0], "w") as f:
        json.dump({"base": 0, "uses": [5, 0, 0]}, f)
    with open(dead[1], "wb") as f:
        f.write(bytes(8))
    alive = os.getpid()
    bad = {
        "not-json": "{",
        "short": json.dumps({"base": 0, "uses": [1, 2]}),
        "negative": json.dumps({"base": 0, "uses": [1, -2, 3]}),
        "reversed": json.dumps({"base": 0, "uses": [1, 5, 3]}),
        "floats": json.dumps({"base": 0, "uses": [1.0, 2, 3]}),
        "no-base": json.dumps({"uses": [1, 2, 3]}),
        "huge": json.dumps({"base": 0, "uses": [1, 2, 3], "pad": "x" * 70_000}),
    }
    for i, text in enumerate(bad.values()):
        with open(os.path.join(folder, f"{alive}-{i:032x}.json"), "w") as f:
            f.write(text)
        with open(os.path.join(folder, f"{alive}-{i:032x}.pos"), "wb") as f:
            f.write((0).to_bytes(8, "little") + (1).to_bytes(8, "little"))
    strangers = [os.path.join(folder, name) for name in ("notes.txt", f"{proc.pid}-x.json")]
    for path in strangers:
        open(path, "w").close()
    target = os.path.join(str(tmp_path), "elsewhere.json")
    with open(target, "w") as f:
        json.dump({"base": 0, "uses": [9, 0, 0]}, f)
    os.symlink(target, os.path.join(folder, f"{alive}-{'f' * 32}.json"))
    with open(os.path.join(folder, f"{alive}-{'f' * 32}.pos"), "wb") as f:
        f.write((0).to_bytes(8, "little") + (1).to_bytes(8, "little"))
    assert DemandBoard(locks).others() == {0: 0}
    assert not any(os.path.exists(p) for p in dead)
    assert all(os.path.exists(p) for p in strangers), "only files named as boards are deleted"


def test_nothing_is_deleted_through_a_linked_demand_folder(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = multiprocessing.get_context("fork").Process(target=os.getpid)
    proc.start()
    proc.join()
    victim = elsewhere / f"{proc.pid}-{'0' * 32}.json"
    victim.write_text("{}")
    locks = lock_dir(str(tmp_path / "cache"))
    os.symlink(elsewhere, os.path.join(locks, DEMAND))
    board = DemandBoard(locks)
    assert board.others() == {}
    assert victim.exists()
    with pytest.raises(UnsafePathError, match="symbolic link"):
        board.publish(spans({1: 0}), 0)  # refused, as a reservation would be
    assert sorted(p.name for p in elsewhere.iterdir()) == [victim.name]
    assert parse_board(b'{"base": 3, "uses": [4, 1, 2]}').uses == ((4, 1, 2),)


def test_a_board_is_written_in_place_and_a_torn_read_is_refused(tmp_path, monkeypatch):
    """A publish created a temp file and renamed it into the folder (~0.25 ms, most of it the rename, at every
    publish of every reader); it now rewrites the one board file in place, with a CRC-32 after the text, so a
    reader that reads it while it is written (new text over the old one's tail, or cut short) refuses it and
    keeps the board it had."""
    locks = lock_dir(str(tmp_path))
    mine, theirs = DemandBoard(locks), DemandBoard(locks)
    theirs.publish(spans({k: 3 * k for k in range(40)}), 0)
    renamed: list[str] = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: renamed.append(b) or real(a, b))
    for read in range(1, 6):
        theirs.publish(spans({7: read}), read)
    assert renamed == []  # was one a publish
    assert mine.others() == {7: 5}
    path = os.path.join(theirs.folder, f"{theirs._own_name()}.json")
    old = board_bytes(0, [k for s in range(40) for k in (s, 3 * s, 3 * s + 10)], 9)
    new = board_bytes(0, [7, 1, 11], 10)
    for torn in (new + old[len(new) :], new[:-3], old[: len(old) // 2] + new):
        assert parse_board(torn) is None
    with open(path, "wb") as f:
        f.write(new + old[len(new) :])
    theirs._progress[8:16] = (10).to_bytes(8, "little")  # a new version announced, its board read mid-write
    assert mine.others() == {7: 5}, "the torn board is refused, the one read before kept"


def _child(board: DemandBoard, conn) -> None:
    board.publish(spans({2: 0}), 0)
    conn.send(sorted(os.listdir(board.folder)))


def test_a_forked_child_publishes_its_own_board(tmp_path):
    board = DemandBoard(lock_dir(str(tmp_path)))
    board.publish(spans({1: 5}), 0)
    parent, child = multiprocessing.get_context("fork").Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(board, child))
    proc.start()
    names = parent.recv()
    proc.join()
    assert len([n for n in names if n.endswith(".json")]) == 2, "the child wrote beside the parent's board"
    own = os.path.join(board.folder, f"{board._own_name()}.json")
    assert parse_board(open(own, "rb").read()).uses == ((1, 5, 15),)
    board.close()
    assert not [n for n in os.listdir(board.folder) if n.startswith(f"{os.getpid()}-")]


def test_eviction_keeps_what_another_reader_opens_next(tmp_path, two_of_three_cached):
    """The shard this reader will not use again but another job opens next stays; one nobody wants goes."""
    folder = str(tmp_path)
    keeper, paths = two_of_three_cached
    os.utime(paths[1], (1, 1))  # shard 1 is the older: least recently used would evict it
    DemandBoard(lock_dir(folder)).publish(spans({1: 3}), 0)
    token = keeper.reserve(2, 1000, [paths[2]], name="shard 2", next_use=lambda k: float("inf"), patience=0)
    assert token is not None
    assert os.path.exists(paths[1]) and not os.path.exists(paths[0])
    space.release_reservation(token)
    assert os.listdir(os.path.join(lock_dir(folder), DEMAND)) != []


def test_a_prefetch_evicts_nothing_another_reader_needs_sooner(tmp_path, two_of_three_cached):
    folder = str(tmp_path)
    keeper, paths = two_of_three_cached
    DemandBoard(lock_dir(folder)).publish(spans({0: 2, 1: 4}), 0)
    own = {0: 50, 1: 60, 2: 5}
    kwargs = dict(name="shard 2", next_use=own.__getitem__, patience=0, ahead=True)
    assert keeper.reserve(2, 1000, [paths[2]], **kwargs) is None, "both are needed (elsewhere) before 5"
    own[2] = 3
    assert keeper.reserve(2, 1000, [paths[2]], **kwargs) is not None
    assert os.path.exists(paths[0]) and not os.path.exists(paths[1]), "shard 1 (needed at 4) went"


def _trailing_jobs(tmp_path, *, boards: bool) -> int:
    """Two jobs read one remote in the same order through one cache with room for 12 of its 80 shards, the
    second 8 shards behind the first (a sweep with one seed, one job started later); the shard downloads they
    made between them. Least recently used eviction deletes exactly the shard the second job needs next."""
    from streaming import MDSWriter, StreamingDataset

    remote = tmp_path / "remote"
    if not remote.exists():
        with MDSWriter(out=str(remote), columns={"x": "int", "pad": "bytes"}, size_limit=16_000) as w:
            for i in range(1200):
                w.write({"x": i, "pad": bytes(1000)})
    shard = max(f.stat().st_size for f in remote.iterdir() if f.name != "index.json")
    jobs = [
        StreamingDataset(
            remote=str(remote), local=str(tmp_path / f"cache-{boards}"), batch_size=8, cache_limit=12 * shard
        )
        for _ in range(2)
    ]
    first, second = iter(jobs[0]), iter(jobs[1])
    got = [int(next(first)["x"]) for _ in range(120)]
    for a, b in zip(first, second):
        got += [int(a["x"]), int(b["x"])]
    got += [int(b["x"]) for b in second]
    assert sorted(got) == sorted(list(range(1200)) * 2)
    return sum(job._shards_access().shard_cache().downloads for job in jobs)


def test_a_trailing_job_finds_its_shards_kept(tmp_path, monkeypatch):
    with_boards = _trailing_jobs(tmp_path, boards=True)
    monkeypatch.setattr(DemandBoard, "others", lambda self, *args, **kwargs: {})
    without = _trailing_jobs(tmp_path, boards=False)
    assert with_boards < 0.75 * without, (with_boards, without)


@given(
    st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.integers() | st.text(max_size=5) | st.none(),
            lambda c: (
                st.lists(c, max_size=6)
                | st.dictionaries(st.sampled_from(["base", "uses", "version", "x"]), c, max_size=4)
            ),
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_any_board_content_parses_or_is_skipped(raw):
    board = parse_board(raw)
    assert board is None or all(0 <= first <= last for _, first, last in board.uses)
