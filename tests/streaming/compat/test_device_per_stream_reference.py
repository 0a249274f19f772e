"""Issue 28 item 6: ``batching_method='device_per_stream'`` against mosaicml-streaming 0.13.0, per device.

Upstream's node leader computes the whole world's plan (``generate_work``); the reference script calls it with a
world of N nodes x R ranks x W workers and reads each device's batches in the order its DataLoader yields them
(worker round-robin, -1 padding skipped). Ours: the dataset's global order for that world, strided per device.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from streaming import MDSWriter, Stream, StreamingDataset
from streaming.reader.world import World
from tests.streaming.compat.reference import run_reference
from tests.streaming.plan.helpers import device_batches

SIZES = (130, 57)  # two streams of different sizes; ids are global (stream 1 starts at 130)

# (nodes, ranks per node, workers, device batch, canonical nodes, shuffle algo or None, epoch, sample_in_epoch)
CASES = [
    (1, 1, 1, 4, 1, None, 0, 0),
    (1, 2, 2, 3, 2, None, 0, 0),
    (1, 4, 1, 2, 4, None, 1, 0),
    (2, 2, 1, 2, 4, None, 0, 0),
    (2, 1, 2, 3, 2, None, 0, 12),
    (1, 1, 1, 4, 1, "py1e", 0, 0),
    (1, 2, 2, 3, 2, "py1s", 1, 0),
    (2, 2, 2, 2, 4, "py1e", 0, 16),
    (1, 4, 1, 2, 4, "naive", 2, 0),
    (1, 2, 1, 5, 8, "py1e", 0, 21),  # resume off a global batch boundary: rounds down as upstream
    (
        1,
        4,
        1,
        3,
        4,
        None,
        0,
        0,
    ),  # 69 device batches a node over 4 ranks: upstream's last global batch partial
    (2, 2, 1, 5, 4, "py1e", 1, 0),  # 19 a node over 2 ranks: the same
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("dps")
    out, at = [], 0
    for k, n in enumerate(SIZES):
        path = root / f"s{k}"
        with MDSWriter(out=str(path), columns={"id": "int"}, size_limit=200) as w:
            for i in range(at, at + n):
                w.write({"id": i})
        at += n
        out.append(str(path))
    return out


_UPSTREAM = """
    import json, types, warnings
    import numpy as np
    from streaming import Stream, StreamingDataset
    from streaming.base.batching import generate_work
    warnings.simplefilter("ignore")
    out = []
    for nodes, ranks, workers, bs, ncn, algo, epoch, drop in {cases!r}:
        ds = StreamingDataset(streams=[Stream(local=f) for f in {folders!r}], batch_size=bs, num_canonical_nodes=ncn,
                              batching_method="device_per_stream", shuffle=algo is not None,
                              shuffle_algo=algo or "py1e", shuffle_seed=1234, shuffle_block_size=50)
        world = types.SimpleNamespace(num_nodes=nodes, ranks_per_node=ranks, workers_per_rank=workers)
        work = generate_work("device_per_stream", ds, world, epoch, drop)
        per_device = {{}}
        for p in range(nodes):
            for r in range(ranks):
                batches = []
                for t in range(work.shape[3]):
                    for w in range(workers):
                        b = [int(i) for i in work[p, r, w, t] if i != -1]
                        if b:
                            batches.append(b)
                per_device[f"{{p}},{{r}}"] = batches
        out.append(per_device)
    print(json.dumps(out))
"""


def _ours(folders: list[str], case: tuple, *, upstream_order: bool) -> dict[str, list[list[int]]]:
    nodes, ranks, workers, bs, ncn, algo, epoch, drop = case
    ds = StreamingDataset(
        streams=[Stream(local=f) for f in folders],
        batch_size=bs,
        num_canonical_nodes=ncn,
        batching_method="device_per_stream",
        shuffle=algo is not None,
        shuffle_algo=algo or "py1e",
        shuffle_seed=1234,
        shuffle_block_size=50,
    )
    ds._plan.world = World(num_nodes=nodes, ranks_per_node=ranks)
    if upstream_order:
        ds._plan.spec_args["upstream_order"] = True
    order = ds._plan.order(epoch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = order.start(drop)
    out = {}
    for p in range(nodes):
        for r in range(ranks):
            got = device_batches(order, drop=start, P=nodes, R=ranks, W=workers, B=bs, d=r * nodes + p)
            out[f"{p},{r}"] = [b.tolist() for b in got]
    return out


@pytest.fixture(scope="module")
def upstream(folders, tmp_path_factory) -> list[dict[str, list[list[int]]]]:
    code = _UPSTREAM.format(cases=CASES, folders=folders)
    return run_reference(code, cwd=tmp_path_factory.mktemp("ref"))  # type: ignore[return-value]


@pytest.mark.parametrize("i", range(len(CASES)), ids=[repr(c) for c in CASES])
def test_every_devices_batches_are_upstreams(folders, upstream, i):
    case = CASES[i]
    expected = upstream[i]
    ours = _ours(folders, case, upstream_order=case[5] is not None)
    for dev, batches in expected.items():
        n = min(len(b) for b in expected.values())  # upstream's trailing partial global batch: dropped here
        assert ours[dev] == batches[:n], (case, dev)
    for dev, batches in ours.items():
        assert all(all(x < SIZES[0] for x in b) or all(x >= SIZES[0] for x in b) for b in batches), dev


def test_a_partial_last_global_batch_is_dropped_where_upstream_serves_some_devices(folders, upstream):
    partial = [i for i, up in enumerate(upstream) if len({len(b) for b in up.values()}) > 1]
    assert partial, "some case exercises upstream's partial last global batch"
    for i in partial:
        ours = _ours(folders, CASES[i], upstream_order=CASES[i][5] is not None)
        assert len({len(b) for b in ours.values()}) == 1, "here every device gets the same number of batches"


def test_an_upstream_state_continues_in_upstreams_order(folders, tmp_path):
    """A mosaicml-streaming state dict switches a shuffled ``device_per_stream`` run to upstream's order."""
    code = f"""
        import json
        from streaming import Stream, StreamingDataset
        ds = StreamingDataset(streams=[Stream(local=f) for f in {folders!r}], batch_size=4, num_canonical_nodes=2,
                              batching_method="device_per_stream", shuffle=True, shuffle_seed=1234)
        ds.load_state_dict({{"epoch": 0, "sample_in_epoch": 8, "num_canonical_nodes": 2, "shuffle_seed": 1234,
                             "initial_physical_nodes": 1}})
        print(json.dumps([int(s["id"]) for s in ds]))
    """
    expected = run_reference(code, cwd=tmp_path)
    ds = StreamingDataset(
        streams=[Stream(local=f) for f in folders],
        batch_size=4,
        num_canonical_nodes=2,
        batching_method="device_per_stream",
        shuffle=True,
        shuffle_seed=1234,
    )
    ds.load_state_dict(
        {
            "epoch": 0,
            "sample_in_epoch": 8,
            "num_canonical_nodes": 2,
            "shuffle_seed": 1234,
            "initial_physical_nodes": 1,
        }
    )
    got = [int(s["id"]) for s in ds]
    assert got == expected
    assert np.unique(got).size == len(got)
