"""Issue 28 item 7: a mosaicml-streaming state dict (what Composer checkpoints of runs on that library hold)
resumes here at exactly the sample upstream would have yielded next."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streaming import MDSWriter, StreamingDataset
from tests.streaming.compat.reference import run_reference

N, TAKEN, SEED = 600, 130, 7
ARGS = dict(batch_size=4, shuffle=True, shuffle_seed=SEED, num_canonical_nodes=2)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    out = tmp_path / "ds"
    with MDSWriter(out=str(out), columns={"id": "int"}, size_limit=400) as w:
        for i in range(N):
            w.write({"id": i})
    return out


def _ours(local: Path, state: dict | None = None) -> list[int]:
    ds = StreamingDataset(local=str(local), **ARGS)
    if state is not None:
        ds.load_state_dict(state)
    return [int(s["id"]) for s in ds]


def test_a_hand_written_upstream_state_continues_the_epoch(dataset):
    state = {"epoch": 0, "sample_in_epoch": 0, "num_canonical_nodes": 2, "shuffle_seed": SEED,
             "initial_physical_nodes": 1}  # fmt: skip
    full = _ours(dataset, state)  # upstream's own order, from the epoch's start
    assert full != _ours(dataset), "this library's native order differs from upstream's"
    state["sample_in_epoch"] = TAKEN
    rest = _ours(dataset, state)
    assert full[:TAKEN] + rest == full and sorted(full) == list(range(N))
    del state["initial_physical_nodes"]  # states of mosaicml-streaming < 0.7
    assert _ours(dataset, state) == rest


def test_an_upstream_state_with_another_seed_is_refused_naming_it(dataset):
    state = {"epoch": 0, "sample_in_epoch": TAKEN, "num_canonical_nodes": 2, "shuffle_seed": 8}
    with pytest.raises(ValueError, match="shuffle_seed=8"):
        StreamingDataset(local=str(dataset), **ARGS).load_state_dict(state)


def test_a_refused_upstream_state_leaves_the_order_as_it_was(dataset):
    """Issue 39 item 9: after `load_state_dict` refused a mosaicml-shaped state, the dataset had switched to
    upstream's shuffle for good: the same dataset then iterated in another order than a fresh one."""
    native = _ours(dataset)
    ds = StreamingDataset(local=str(dataset), **ARGS)
    bad = {"epoch": 0, "sample_in_epoch": TAKEN, "num_canonical_nodes": 2, "shuffle_seed": 8}
    with pytest.raises(ValueError, match="shuffle_seed=8"):
        ds.load_state_dict(bad)
    assert [int(s["id"]) for s in ds] == native


_UPSTREAM = """
    import json
    from streaming import StreamingDataset
    ds = StreamingDataset(local={local!r}, batch_size=4, shuffle=True, shuffle_seed={seed}, num_canonical_nodes=2)
    state = json.loads({state!r})
    if state:
        ds.load_state_dict(state)
    ids = []
    for sample in ds:
        ids.append(int(sample["id"]))
        if len(ids) == {stop}:
            break
    print(json.dumps({{"ids": ids, "state": ds.state_dict(len(ids), from_beginning=False)}}))
"""


def test_a_run_stopped_under_mosaicml_streaming_continues_here_exactly(dataset, tmp_path):
    def upstream(state: dict | None, stop: int) -> dict:
        code = _UPSTREAM.format(local=str(dataset), seed=SEED, state=json.dumps(state or {}), stop=stop)
        return run_reference(code, cwd=tmp_path)  # type: ignore[return-value]

    first = upstream(None, TAKEN)  # the run on mosaicml-streaming, stopped mid-epoch (a checkpoint)
    state = first["state"]
    assert set(state) >= {"epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed"}
    assert state["sample_in_epoch"] == TAKEN
    upstream_rest = upstream(state, -1)["ids"]  # what upstream yields when it continues
    ours_rest = _ours(dataset, state)  # the same checkpoint, continued here
    assert ours_rest == upstream_rest
    assert sorted(first["ids"] + ours_rest) == list(range(N)), "the union is the epoch, no duplicates"


_TWO_EPOCHS = """
    import json
    from streaming import StreamingDataset
    ds = StreamingDataset(local={local!r}, batch_size=4, shuffle=True, shuffle_seed={seed}, num_canonical_nodes=2)
    print(json.dumps([[int(s["id"]) for s in ds] for _ in range(2)]))
"""


def test_later_epochs_and_our_own_checkpoints_keep_upstreams_order(dataset, tmp_path):
    from streaming import StreamingDataLoader

    epoch0, epoch1 = run_reference(_TWO_EPOCHS.format(local=str(dataset), seed=SEED), cwd=tmp_path)  # type: ignore[misc]
    ds = StreamingDataset(local=str(dataset), **ARGS)
    ds.load_state_dict({"epoch": 0, "sample_in_epoch": TAKEN, "num_canonical_nodes": 2, "shuffle_seed": SEED})
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2)
    assert [int(i) for b in loader for i in b["id"]] == epoch0[TAKEN:]
    seen = []
    for batch in loader:  # epoch 1, stopped after 10 batches: a checkpoint of ours
        seen += [int(i) for i in batch["id"]]
        if len(seen) == 40:
            break
    state = loader.state_dict()
    assert state["order"] == "mosaicml-streaming"
    again = StreamingDataset(local=str(dataset), **ARGS)
    again.load_state_dict(state)
    rest = [int(i) for b in StreamingDataLoader(again, batch_size=4, num_workers=2) for i in b["id"]]
    assert seen + rest == epoch1


WEIGHTS = [
    [{"choose": 100}, {}],
    [{"repeat": 2}, {"repeat": 0.5}],
    [{"proportion": 3}, {"proportion": 1}],
    [{}, {}],
]


@pytest.mark.parametrize("weights", WEIGHTS, ids=lambda w: repr(w))
def test_derived_weights_are_written_back_onto_the_streams_as_upstream_does(dataset, tmp_path, weights):
    """Issue 28 item 4: upstream fills in every Stream's proportion, repeat and choose."""
    from streaming import Stream

    second = tmp_path / "second"
    with MDSWriter(out=str(second), columns={"id": "int"}, size_limit=400) as w:
        for i in range(200):
            w.write({"id": i})
    folders = [str(dataset), str(second)]
    code = f"""
        import json
        from streaming import Stream, StreamingDataset
        streams = [Stream(local=f, **w) for f, w in zip({folders!r}, {weights!r})]
        StreamingDataset(streams=streams, batch_size=4)
        print(json.dumps([[float(s.proportion), float(s.repeat), int(s.choose)] for s in streams]))
    """
    expected = run_reference(code, cwd=tmp_path)
    streams = [Stream(local=f, **w) for f, w in zip(folders, weights)]
    StreamingDataset(streams=streams, batch_size=4)
    got = [[s.proportion, s.repeat, s.choose] for s in streams]
    assert [x for row in got for x in row] == pytest.approx([x for row in expected for x in row])
    again = StreamingDataset(streams=streams, batch_size=4)  # the filled-in streams can be used again
    assert again.epoch_size == sum(c for _, _, c in got)


def test_stratified_shares_match_upstream_and_a_zero_share_is_refused(dataset, tmp_path):
    """Issue 28 items 8, 10: a tied leftover goes to the later stream (as upstream); a share of 0 is an error
    (before: that stream was silently left out of every batch)."""
    from streaming import Stream

    second = tmp_path / "second"
    with MDSWriter(out=str(second), columns={"id": "int"}, size_limit=400) as w:
        for i in range(N, 2 * N):
            w.write({"id": i})
    folders = [str(dataset), str(second)]
    code = f"""
        import json
        from streaming import Stream, StreamingDataset
        ds = StreamingDataset(streams=[Stream(local=f) for f in {folders!r}], batch_size=5,
                              batching_method="stratified", shuffle=False)
        ids = [int(s["id"]) for _, s in zip(range(5), ds)]
        print(json.dumps(sum(i >= {N} for i in ids)))
    """
    upstream_second = run_reference(code, cwd=tmp_path)
    ds = StreamingDataset(
        streams=[Stream(local=f) for f in folders], batch_size=5, batching_method="stratified", shuffle=False
    )
    ids = [int(s["id"]) for _, s in zip(range(5), ds)]
    assert sum(i >= N for i in ids) == upstream_second == 3
    tiny = StreamingDataset(
        streams=[Stream(local=folders[0], proportion=0.95), Stream(local=folders[1], proportion=0.05)],
        batch_size=5,
        batching_method="stratified",
    )
    with pytest.raises(
        ValueError, match="^Number of samples for stream 1 .*share of a global batch of 5 rounds to 0"
    ):
        next(iter(tiny))
