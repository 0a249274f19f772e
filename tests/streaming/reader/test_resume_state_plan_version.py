"""Resume states record the order version of their shuffle; a mid-epoch state of another version is refused."""

from __future__ import annotations

from typing import Any

import pytest

from streaming import MDSWriter, StreamingDataset
from streaming.plan import PLAN_VERSIONS, plan_version
from streaming.reader.resume_state import build_state, dataset_config, plan_mismatch, resume_mismatches


def _config(algo: str = "py1e", shuffle: bool = True) -> dict[str, Any]:
    return dataset_config(
        shuffle=shuffle,
        shuffle_algo=algo,
        shuffle_seed=1,
        shuffle_block_size=100,
        partition_algo="relaxed",
        batching_method="random",
        sampling_method="balanced",
        sampling_granularity=1,
        epoch_size=1000,
        fingerprint="f",
    )


def _state(at: int, algo: str = "py1e", version: int | None = None) -> dict[str, Any]:
    state = build_state(
        epoch=2,
        sample_in_epoch=at,
        global_batch_size=8,
        num_canonical_nodes=1,
        initial_physical_nodes=1,
        config=_config(algo),
    )
    if version is None:
        del state["plan_version"]  # a state written before plan versions existed
    else:
        state["plan_version"] = version
    return state


def test_states_record_the_plan_version():
    assert _config()["plan_version"] == PLAN_VERSIONS["py1e"] == 2
    assert _config(shuffle=False)["plan_version"] == plan_version(None) == 1
    assert _config("naive")["plan_version"] == 1


@pytest.mark.parametrize("algo", ["py1e", "py1br", "py1s", "py2s"])
def test_mid_epoch_state_of_the_old_order_is_refused(algo):
    diffs = resume_mismatches(_state(40, algo), ncn_arg=None, config_for=lambda c: _config(algo))
    assert len(diffs) == 1
    assert "plan_version" in diffs[0] and "40 samples into epoch 2" in diffs[0]
    assert f"shuffle_algo={algo!r}" in diffs[0] and "'sample_in_epoch' to 0" in diffs[0]


def test_old_state_at_an_epoch_boundary_or_of_an_unchanged_order_resumes():
    mine = lambda c: _config()  # noqa: E731
    assert resume_mismatches(_state(0), ncn_arg=None, config_for=mine) == []
    assert resume_mismatches(_state(1000), ncn_arg=None, config_for=mine) == []  # the epoch is finished
    assert resume_mismatches(_state(40, version=2), ncn_arg=None, config_for=mine) == []
    assert resume_mismatches(_state(40, "naive"), ncn_arg=None, config_for=lambda c: _config("naive")) == []
    unshuffled = lambda c: _config(shuffle=False)  # noqa: E731
    old = _state(40)
    old["shuffle"] = False
    assert resume_mismatches(old, ncn_arg=None, config_for=unshuffled) == []
    assert plan_mismatch(_state(40, version=1), _config()) is not None


def test_dataset_refuses_a_mid_epoch_state_of_the_old_order(tmp_path):
    with MDSWriter(out=str(tmp_path / "ds"), columns={"x": "int"}, size_limit=200) as w:
        for i in range(100):
            w.write({"x": i})
    ds = StreamingDataset(local=str(tmp_path / "ds"), batch_size=4, shuffle=True)
    state = ds.state_dict(num_samples=12, from_beginning=True)
    assert state["plan_version"] == 2
    fresh = StreamingDataset(local=str(tmp_path / "ds"), batch_size=4, shuffle=True)
    fresh.load_state_dict(state)  # same version: resumes
    old = {k: v for k, v in state.items() if k != "plan_version"}
    with pytest.raises(ValueError, match="plan_version: the state was saved 12 samples into epoch 0"):
        fresh.load_state_dict(old)
    fresh.load_state_dict({**old, "sample_in_epoch": 0})  # the fix the message names
    assert len([s["x"] for s in fresh]) == 100
