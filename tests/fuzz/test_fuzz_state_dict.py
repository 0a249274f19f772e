"""Fuzz (issue 39), entry point 4: resume states passed to `StreamingDataset.load_state_dict`: mosaicml-streaming
shaped ones (what Composer checkpoints of runs on that library hold) and ours, with wrong types, negative or
huge values, missing and extra keys.

Contract beyond the one-line error: a refused state changes nothing (the next epoch is the order the dataset
had before; issue 39, item 9: it used to switch to upstream's shuffle for good), and an accepted one iterates
(no raw error, within the time and memory bounds) over samples of the dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from tests.fuzz import hostile
from tests.fuzz.harness import fuzz

ENTRY = "StreamingDataset.load_state_dict (mosaicml-streaming and own states)"
ALLOWED = (ValueError, FileNotFoundError)  # train.py's one-line errors
NAMES = ("state", "resume", "epoch", "num_canonical_nodes", "shuffle")
SECRET_IN_PATH = False  # no file names in these messages
SHORT_EXAMPLES = 30
N = 40
UPSTREAM = ("epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed")


def prepare(work: Path) -> dict[str, Any]:
    from streaming import MDSWriter

    with MDSWriter(out=str(work / "ds"), columns={"x": "int"}, size_limit=120) as w:
        for i in range(N):
            w.write({"x": i})
    return {"ds": work / "ds"}


def _numbers() -> st.SearchStrategy[Any]:
    return st.integers(0, 3) | st.integers(0, 2 * N) | hostile.integers() | hostile.scalars()


def cases() -> st.SearchStrategy[dict[str, Any]]:
    valid = st.fixed_dictionaries(
        {
            "epoch": st.integers(0, 3),
            "sample_in_epoch": st.integers(0, 2 * N),
            "num_canonical_nodes": st.integers(1, 4),
            "shuffle_seed": st.just("SEED"),
        },
        optional={"initial_physical_nodes": st.integers(1, 2)},
    )
    hostile_fields = st.dictionaries(
        st.sampled_from([*UPSTREAM, "initial_physical_nodes", "version", "order"]), _numbers(), max_size=2
    )
    upstream = st.builds(
        lambda state, changes, drop: {k: v for k, v in {**state, **changes}.items() if k != drop},
        valid,
        hostile_fields,
        st.sampled_from([None, None, None, *UPSTREAM]),
    )
    ours = st.tuples(st.just("ours"), st.integers(0, 2 * N), hostile.json_edits())
    return st.fixed_dictionaries(
        {
            "state": upstream | ours | hostile.json_values(),
            "shuffle": st.booleans(),
            "shuffle_algo": st.sampled_from(["py1e", "py1s", "py1br", "naive", "py2s"]),
            "seed": st.sampled_from([17, 9176]),
        }
    )


def EXAMPLES() -> list[dict[str, Any]]:
    upstream = {"epoch": 0, "sample_in_epoch": 8, "num_canonical_nodes": 1, "shuffle_seed": 17}
    return [
        {"state": upstream, "shuffle": True, "shuffle_algo": "py1e", "seed": 17, "resumes_at": 8},
        {
            "state": ("ours", 12, hostile.NO_EDIT),
            "shuffle": True,
            "shuffle_algo": "py1e",
            "seed": 17,
            "resumes_at": 12,
        },
        {
            "state": {**upstream, "shuffle_seed": 5},
            "shuffle": True,
            "shuffle_algo": "py1e",
            "seed": 17,
        },  # refused
        {"state": {**upstream, "epoch": "0"}, "shuffle": True, "shuffle_algo": "py1e", "seed": 17},
    ]


def write_roots(folder: Path) -> list[Path]:
    return []


def _dataset(base: dict[str, Any], case: dict[str, Any]) -> Any:
    from streaming import StreamingDataset

    return StreamingDataset(
        local=str(base["ds"]),
        batch_size=4,
        shuffle=case["shuffle"],
        shuffle_algo=case["shuffle_algo"],
        shuffle_seed=case["seed"],
        num_canonical_nodes=1,
    )


def build(case: dict[str, Any], folder: Path, base: dict[str, Any]) -> dict[str, Any]:
    state = case["state"]
    if isinstance(state, tuple) and state and state[0] == "ours":
        saved = _dataset(base, case).state_dict(num_samples=state[1], from_beginning=True)
        state = hostile.edit_value(saved, state[2])
    if isinstance(state, dict) and state.get("shuffle_seed") == "SEED":
        state = {**state, "shuffle_seed": case["seed"]}
    state = hostile.materialize(state)
    return {**case, "obj": state, "ds": _dataset(base, case), "reference": _dataset(base, case)}


def attempt(built: dict[str, Any], folder: Path) -> None:
    ds, obj = built["ds"], built["obj"]
    try:
        ds.load_state_dict(obj)
    except ValueError:
        after = [s["x"] for s in ds]
        assert after == [s["x"] for s in built["reference"]], "a refused state changed the order"
        raise
    ids = [s["x"] for s in ds]
    # samples of the dataset; a partition over C canonical nodes pads the epoch with repeats (as upstream does)
    assert len(ids) <= 2 * N and all(0 <= i < N for i in ids), ids
    if "resumes_at" in built:
        assert len(ids) == N - built["resumes_at"], ids


def test_short(tmp_path):
    fuzz(__file__, tmp_path)


@pytest.mark.slow
def test_long(tmp_path):
    fuzz(__file__, tmp_path, long=True)
