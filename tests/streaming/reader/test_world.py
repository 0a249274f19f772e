from __future__ import annotations

import pytest

from streaming.reader.world import World


def test_defaults_single_process():
    w = World.detect(env={})
    assert (w.num_nodes, w.ranks_per_node, w.rank, w.device, w.num_devices) == (1, 1, 0, 0, 1)


def test_from_env():
    w = World.detect(env={"RANK": "5", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"})
    assert (w.num_nodes, w.ranks_per_node, w.node, w.rank_in_node) == (2, 4, 1, 1)
    assert w.device == 1 * 2 + 1  # rank-in-node major
    assert sorted(World(num_nodes=2, ranks_per_node=4, rank=r).device for r in range(8)) == list(range(8))


@pytest.mark.parametrize(
    "env, msg",
    [
        ({"RANK": "x"}, "not an integer"),
        ({"WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "4"}, "divide WORLD_SIZE"),
        ({"RANK": "3", "WORLD_SIZE": "2"}, "out of range"),
    ],
)
def test_bad_env(env, msg):
    with pytest.raises(ValueError, match=msg):
        World.detect(env=env)


def test_replication_groups_share_a_device():
    devs = [World(num_nodes=2, ranks_per_node=4, rank=r, replication=2).device for r in range(8)]
    assert devs[0] == devs[1] and devs[2] == devs[3] and len(set(devs)) == 4
    assert sorted(set(devs)) == [0, 1, 2, 3]
    devs = [World(num_nodes=4, ranks_per_node=1, rank=r, replication=2).device for r in range(4)]
    assert devs == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="replication"):
        World(num_nodes=1, ranks_per_node=3, replication=2)


def test_process_group_wins_and_disagreement_is_an_error(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    w = World.detect(env={"LOCAL_WORLD_SIZE": "2"})
    assert (w.rank, w.num_ranks) == (1, 2)
    with pytest.raises(ValueError, match="process group says rank=1 but the environment says RANK=0"):
        World.detect(env={"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"})

    def gather(out, obj):
        out[:] = [obj, obj]

    monkeypatch.setattr(dist, "all_gather_object", gather)
    assert World.detect(env={}).ranks_per_node == 2


def test_worker_view():
    w = World(num_nodes=1, ranks_per_node=2, rank=1).with_workers(3, 2)
    assert (w.workers_per_rank, w.worker) == (3, 2)
    with pytest.raises(ValueError, match="worker"):
        World().with_workers(2, 2)
