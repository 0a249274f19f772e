"""Resume states on hostile input (issue 39): each case is a state the fuzz suite (`tests/fuzz`) found ending in a
raw traceback (`TypeError`, `KeyError`, `RecursionError`) or an error naming no field; each is now one
`ValueError` naming the field, and a refused state leaves the dataset's order as it was."""

from __future__ import annotations

import pytest

from streaming import MDSWriter, StreamingDataset
from tests.fuzz.hostile import Deep, materialize

UPSTREAM = {"epoch": 0, "sample_in_epoch": 8, "num_canonical_nodes": 1, "shuffle_seed": 17}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("ds")
    with MDSWriter(out=str(path), columns={"x": "int"}, size_limit=120) as w:
        for i in range(40):
            w.write({"x": i})
    return str(path)


def _ds(data):
    return StreamingDataset(local=data, batch_size=4, shuffle=True, shuffle_seed=17, num_canonical_nodes=1)


def _ours(data, **changes):
    state = _ds(data).state_dict(num_samples=12, from_beginning=True)
    state.update(changes)
    return {k: v for k, v in state.items() if v != "DROP"}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({**UPSTREAM, "num_canonical_nodes": "NaN"}, r"num_canonical_nodes must be an int >= 1, got 'NaN'"),
        ({**UPSTREAM, "epoch": [1]}, r"epoch must be an int >= 0, got \[1\]"),
        (
            {**UPSTREAM, "initial_physical_nodes": True},
            "initial_physical_nodes must be an int >= 1, got True",
        ),
    ],
)
def test_a_mosaicml_state_of_the_wrong_types_is_named(data, state, message):
    """The canonical nodes sized the plan before they were checked: `TypeError` in `plan/epoch.py`."""
    with pytest.raises(ValueError, match=message):
        _ds(data).load_state_dict(state)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"epoch": "DROP"}, r"epoch must be an int >= 0, got None"),  # was KeyError (epoch_planner.py)
        ({"epoch": [0]}, r"epoch must be an int >= 0, got \[0\]"),  # was TypeError: int() of a list
        (
            {"sample_in_epoch": -313101011},
            r"sample_in_epoch must be an int >= 0",
        ),  # was 'expected non-negative'
        ({"global_batch_size": 0}, r"global_batch_size must be an int >= 1 or null, got 0"),
        ({"version": Deep(5000, "list")}, r"got version \[\[\[\.\.\.\]\]\]"),  # was RecursionError in repr
        ({"shuffle_seed": Deep(5000, "dict")}, r"shuffle_seed: state has \{'a': \{'a': \{\.\.\.\}\}\}"),
        ({"streams": [1, "x"]}, r"streams_fingerprint: state has"),  # a list of anything: no detail, no crash
    ],
)
def test_our_state_of_the_wrong_types_is_named(data, changes, message):
    state = materialize(_ours(data, **changes))
    if "streams" in changes:
        state["streams_fingerprint"] = "0" * 16
    ds = _ds(data)
    with pytest.raises(ValueError, match=message):
        ds.load_state_dict(state)
    assert [s["x"] for s in ds] == [s["x"] for s in _ds(data)]  # refused: the order is the dataset's own
