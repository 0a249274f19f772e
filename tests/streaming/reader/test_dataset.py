from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming import MDSWriter
from streaming.reader.dataset import StreamingDataset
from streaming.reader.stream import Stream
from streaming.reader.world import World


def write_ids(path, start, n, *, size_limit=200, compression=None):
    """A dataset whose sample k has id = start + k (about 10 samples per shard at 200 bytes)."""
    with MDSWriter(
        out=str(path), columns={"id": "int", "s": "str"}, size_limit=size_limit, compression=compression
    ) as w:
        for k in range(n):
            w.write({"id": start + k, "s": f"x{start + k}"})
    return str(path)


@pytest.fixture(scope="module")
def two_streams(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    return write_ids(root / "a", 0, 97), write_ids(root / "b", 1000, 61)


def ids_of(ds):
    return [s["id"] for s in ds]


def test_random_access_and_len(two_streams):
    a, b = two_streams
    ds = StreamingDataset(streams=[Stream(local=a), Stream(local=b)])
    assert ds.size == 158 and ds.num_shards > 2
    assert ds[0]["id"] == 0 and ds[-1]["id"] == 1060 and ds[97]["id"] == 1000
    assert [x["id"] for x in ds[3:6]] == [3, 4, 5]
    assert [x["id"] for x in ds[[1, 100]]] == [1, 1003]
    assert [x["id"] for x in ds[np.array([2, -2])]] == [2, 1059]
    with pytest.raises(IndexError):
        ds[158]


def test_iteration_is_a_permutation_and_len_is_exact(two_streams):
    a, b = two_streams
    ds = StreamingDataset(
        streams=[Stream(local=a), Stream(local=b)], batch_size=4, shuffle=True, num_canonical_nodes=3
    )
    n = len(ds)
    got = ids_of(ds)
    assert len(got) == n
    assert set(got) == set(range(97)) | set(range(1000, 1061))
    assert len(got) - 158 < 3  # only canonical-node padding repeats


def test_batch_size_missing_and_too_few_samples(two_streams):
    a, _ = two_streams
    with pytest.raises(ValueError, match="Please pass `batch_size`"):
        iter(StreamingDataset(local=a))
    with pytest.raises(ValueError, match="fewer than num_canonical_nodes"):
        iter(StreamingDataset(local=a, batch_size=1, num_canonical_nodes=500))


def test_mixing_choose_repeat_proportion(two_streams):
    a, b = two_streams
    ds = StreamingDataset(streams=[Stream(local=a, choose=50), Stream(local=b, repeat=2)], batch_size=1)
    assert ds.choose_per_stream.tolist() == [50, 122]
    got = collections.Counter(x >= 1000 for x in ids_of(ds))
    assert got[False] == 50 and got[True] == 122
    ds = StreamingDataset(
        streams=[Stream(local=a, proportion=1), Stream(local=b, proportion=3)], epoch_size="100", batch_size=1
    )
    assert ds.choose_per_stream.tolist() == [25, 75]
    with pytest.raises(ValueError, match="mix relative"):
        StreamingDataset(streams=[Stream(local=a, proportion=1), Stream(local=b, repeat=3)])


def test_epochs_advance_and_differ(two_streams):
    a, _ = two_streams
    ds = StreamingDataset(local=a, batch_size=2, shuffle=True)
    e0, e1 = ids_of(ds), ids_of(ds)
    assert sorted(e0) == sorted(e1) == list(range(97)) and e0 != e1
    again = StreamingDataset(local=a, batch_size=2, shuffle=True)
    assert ids_of(again) == e0  # deterministic


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    algo=st.sampled_from(["naive", "py1s", "py2s", "py1br", "py1e"]),
    batching=st.sampled_from(["random", "stratified", "per_stream"]),
    stop=st.integers(0, 300),
)
def test_resumption_mid_epoch_and_across_epochs(two_streams, algo, batching, stop):
    a, b = two_streams

    def make():
        return StreamingDataset(
            streams=[Stream(local=a), Stream(local=b, repeat=1.5)],
            batch_size=4,
            shuffle=True,
            shuffle_algo=algo,
            shuffle_block_size=30,
            batching_method=batching,
            num_canonical_nodes=2,
        )

    ds = make()
    full = ids_of(ds) + ids_of(ds)  # two epochs, uninterrupted
    ds2 = make()
    seen, it = 0, iter(ds2)
    first = len(ds2)
    state = None
    for k, _x in enumerate(it):
        if k == min(stop, first):
            break
        seen += 1
    if stop >= first:  # stopped at the epoch end: the state rolls over to epoch 1
        state = ds2.state_dict(num_samples=first, from_beginning=True)
        seen = first
    else:
        state = ds2.state_dict(num_samples=seen, from_beginning=True)
    state = json.loads(json.dumps(state))
    ds3 = make()
    ds3.load_state_dict(state)
    rest = ids_of(ds3)
    if stop < first:  # else the state rolled over and ``rest`` is all of epoch 1
        rest = rest + ids_of(ds3)
    assert rest == full[seen:]


def test_state_mismatch_names_the_difference(two_streams):
    a, b = two_streams
    ds = StreamingDataset(local=a, batch_size=2, shuffle=True)
    st_ = ds.state_dict(num_samples=10)
    assert st_["version"] == 1 and st_["shuffle_algo"] == "py1e" and "streams_fingerprint" in st_
    with pytest.raises(ValueError, match="shuffle_seed: state has 9176, dataset has 1"):
        StreamingDataset(local=a, batch_size=2, shuffle=True, shuffle_seed=1).load_state_dict(st_)
    with pytest.raises(ValueError, match="streams_fingerprint"):
        StreamingDataset(local=b, batch_size=2, shuffle=True).load_state_dict(st_)
    with pytest.raises(ValueError, match="version"):
        ds.load_state_dict({"epoch": 0, "sample_in_epoch": 3})
    other = StreamingDataset(local=a, batch_size=4, shuffle=True)
    other.load_state_dict(st_)
    with pytest.raises(ValueError, match="global batch size 2"):
        iter(other)


def test_compressed_shards_are_prepared_atomically_and_leftovers_are_harmless(tmp_path):
    path = write_ids(tmp_path / "z", 0, 40, compression="zstd")
    # a kill -9 during decompression leaves a temp file; the next start must not care
    shard0 = json.load(open(os.path.join(path, "index.json")))["shards"][0]
    open(os.path.join(path, shard0["raw_data"]["basename"] + ".tmp-999-1"), "wb").write(b"garbage")
    ds = StreamingDataset(local=path, batch_size=3, shuffle=True)
    assert sorted(ids_of(ds)) == list(range(40))
    assert os.path.exists(os.path.join(path, shard0["raw_data"]["basename"]))


def test_missing_shard_is_a_clear_error(tmp_path):
    path = write_ids(tmp_path / "m", 0, 30)
    shard0 = json.load(open(os.path.join(path, "index.json")))["shards"][0]
    os.remove(os.path.join(path, shard0["raw_data"]["basename"]))
    ds = StreamingDataset(local=path, batch_size=1)
    with pytest.raises(FileNotFoundError, match="is missing"):
        ds[0]


def test_two_jobs_read_one_directory_at_once(two_streams):
    a, _ = two_streams
    code = (
        "import sys; from streaming.reader.dataset import StreamingDataset as D;"
        f"ds = D(local={a!r}, batch_size=2, shuffle=True); print(sorted(s['id'] for s in ds) == list(range(97)))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert outs == ["True", "True"]


def test_unsafe_types_rejected(tmp_path):
    with MDSWriter(out=str(tmp_path / "p"), columns={"o": "pkl"}) as w:
        w.write({"o": {"a": 1}})
    with pytest.raises(ValueError, match="allow_unsafe_types"):
        StreamingDataset(local=str(tmp_path / "p"))
    assert StreamingDataset(local=str(tmp_path / "p"), allow_unsafe_types=True)[0]["o"] == {"a": 1}


def test_argument_errors(two_streams):
    a, _ = two_streams
    for kw, msg in [
        ({"shuffle_algo": "py9"}, "shuffle_algo"),
        ({"partition_algo": "x"}, "partition_algo"),
        ({"shuffle_seed": -1}, "shuffle_seed"),
        ({"cache_limit": 10}, "cache_limit"),
        ({"streams": [Stream(local=a)]}, "either streams"),
    ]:
        with pytest.raises(ValueError, match=msg):
            StreamingDataset(local=a, **kw)


def test_orig_partition_checks_divisibility(two_streams, monkeypatch):
    a, _ = two_streams
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    with pytest.raises(ValueError, match="divide"):
        iter(StreamingDataset(local=a, batch_size=2, partition_algo="orig", num_canonical_nodes=2))
    ds = StreamingDataset(local=a, batch_size=2, partition_algo="relaxed", num_canonical_nodes=2)
    assert len(ds) == len(list(ds)) == 33  # rank 0 of 3 devices: ceil(98 / 3)


def test_an_explicit_world_is_used_instead_of_the_environment(two_streams, monkeypatch):
    a, _ = two_streams
    kw = {"local": a, "batch_size": 2, "num_canonical_nodes": 2}
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    detected = ids_of(StreamingDataset(**kw))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    explicit = StreamingDataset(**kw, world=World(num_nodes=3, ranks_per_node=1, rank=1))
    assert len(explicit) == len(detected) == 33 and ids_of(explicit) == detected
    assert len(StreamingDataset(**kw)) == 98  # the environment alone: one rank sees every sample
    replicated = StreamingDataset(**kw, world=World(num_nodes=1, ranks_per_node=2, rank=1), replication=2)
    assert ids_of(replicated) == ids_of(
        StreamingDataset(**kw, world=World(num_nodes=1, ranks_per_node=2), replication=2)
    )
    with pytest.raises(ValueError, match="one worker"):
        StreamingDataset(**kw, world=World().with_workers(2, 1))
