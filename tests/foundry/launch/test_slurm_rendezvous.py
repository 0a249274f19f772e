"""The pure Slurm parts: SLURM_* -> placement -> torchrun options, the node list, run names, the node command."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from submitit.slurm.slurm import _parse_node_list

from foundry.launch.rendezvous import Placement, expand_nodelist, placement_from_env, torchrun_options
from foundry.launch.slurm import node_command, prepare_params, run_names


@pytest.mark.parametrize(
    ("spec", "hosts"),
    [
        ("node1", ["node1"]),
        ("gpu[01-03,07],login5", ["gpu01", "gpu02", "gpu03", "gpu07", "login5"]),
        ("a[1-2]b[3,5]", ["a1b3", "a1b5", "a2b3", "a2b5"]),
        ("rack1-n[8-10]", ["rack1-n8", "rack1-n9", "rack1-n10"]),
        ("n[009-011]", ["n009", "n010", "n011"]),
    ],
)
def test_expand_nodelist(spec, hosts):
    assert expand_nodelist(spec) == hosts
    assert _parse_node_list(spec) == hosts  # submitit's own parser agrees


_name = st.text("abcxyz-", min_size=1, max_size=4)
_range = st.tuples(st.integers(0, 30), st.integers(0, 5), st.integers(1, 3)).map(
    lambda t: f"{t[0]:0{t[2]}d}" + (f"-{t[0] + t[1]:0{t[2]}d}" if t[1] else "")
)
_group = st.tuples(_name, st.lists(_range, min_size=1, max_size=3)).map(lambda t: f"{t[0]}[{','.join(t[1])}]")


@given(st.lists(st.one_of(_name, _group), min_size=1, max_size=4))
def test_expand_nodelist_matches_submitit(groups):
    spec = ",".join(groups)
    assert expand_nodelist(spec) == _parse_node_list(spec)


@pytest.mark.parametrize("spec", ["gpu[1-3", "gpu]1", "a,,b", "gpu[3-1]", "gpu[a-b]", "x[[1]]"])
def test_bad_nodelist_names_the_variable(spec):
    with pytest.raises(ValueError, match="SLURM_JOB_NODELIST"):
        expand_nodelist(spec)


def _slurm(**extra: str) -> dict[str, str]:
    return {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "3", "SLURM_NODEID": "2",
            "SLURM_JOB_NODELIST": "gpu[07-09]", **extra}  # fmt: skip


def test_placement_from_slurm_env():
    p = placement_from_env(_slurm(), hostname="ignored")
    assert p == Placement(num_nodes=3, node_rank=2, hosts=("gpu07", "gpu08", "gpu09"), job_id="4242")
    assert p.master == "gpu07"
    nn = placement_from_env({**_slurm(), "SLURM_JOB_NUM_NODES": "", "SLURM_NNODES": "3"}, hostname="x")
    assert nn.num_nodes == 3
    array = placement_from_env(_slurm(SLURM_ARRAY_JOB_ID="77", SLURM_ARRAY_TASK_ID="1"), hostname="x")
    assert array.job_id == "77_1"


def test_placement_outside_slurm_is_one_local_node():
    p = placement_from_env({"SUBMITIT_LOCAL_JOB_ID": "99"}, hostname="box")
    assert p == Placement(num_nodes=1, node_rank=0, hosts=("box",), job_id="99")


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"SLURM_JOB_NODELIST": "gpu[07-08]"}, "names 2 hosts but the job has 3"),
        ({"SLURM_NODEID": "3"}, "SLURM_NODEID=3 is outside 0..2"),
        ({"SLURM_NODEID": "x"}, "SLURM_NODEID='x' is not an integer"),
        ({"SLURM_NODEID": ""}, "none of SLURM_NODEID is set"),
    ],
)
def test_bad_slurm_env_is_a_clear_error(env, match):
    with pytest.raises(ValueError, match=match):
        placement_from_env(_slurm(**env), hostname="x")


def test_torchrun_options_c10d_static_and_one_node():
    p = placement_from_env(_slurm(), hostname="x")
    assert torchrun_options(p, nproc_per_node=8) == [
        "--nnodes=3", "--nproc-per-node=8", "--rdzv-backend=c10d", "--rdzv-endpoint=gpu07:29400",
        "--rdzv-id=4242",
    ]  # fmt: skip
    assert torchrun_options(p, nproc_per_node=4, backend="static", port=1234) == [
        "--nnodes=3", "--nproc-per-node=4", "--node-rank=2", "--master-addr=gpu07", "--master-port=1234",
    ]  # fmt: skip
    one = Placement(num_nodes=1, node_rank=0, hosts=("box",), job_id="1")
    assert torchrun_options(one, nproc_per_node=2) == ["--standalone", "--nnodes=1", "--nproc-per-node=2"]
    with pytest.raises(ValueError, match="rdzv_backend='etcd'"):
        torchrun_options(p, nproc_per_node=1, backend="etcd")


def test_run_names_and_node_command():
    assert run_names([["a=1"]], "base") == ["base"]
    assert run_names([["a=1"], ["a=2", "run_name=mine"], ["a=3"]], "base") == ["base-0", "mine", "base-2"]
    cmd = node_command("py", ["--max-restarts=3"], ["--standalone"], "/r/train.py", ["x=1"])
    assert cmd == [
        "py",
        "-m",
        "foundry.launch",
        "--max-restarts=3",
        "--standalone",
        "--",
        "/r/train.py",
        "x=1",
    ]


def test_prepare_params_wires_the_preemption_signal_and_rejects_typos():
    sub, node = prepare_params(
        "slurm",
        {"submitit_folder": "f", "name": "n", "nodes": 2, "signal_delay_s": 300, "account": "acct",
         "additional_parameters": {"mail-type": "END"}, "node": {"launcher_args": ["--cuda"]}},
    )  # fmt: skip
    assert sub["setup"] == ["export SUBMITIT_PREEMPT_SIGNAL=TERM"]
    assert sub["additional_parameters"] == {"requeue": True, "mail-type": "END", "signal": "TERM@300"}
    assert sub["nodes"] == 2 and sub["account"] == "acct" and "node" not in sub and "_target_" not in sub
    assert node.launcher_args == ["--cuda"] and node.rdzv_backend == "c10d"
    with pytest.raises(ValueError, match="gpus_per_nod"):
        prepare_params("slurm", {"submitit_folder": "f", "name": "n", "gpus_per_nod": 8})
    with pytest.raises(ValueError, match="nproc_per_nod"):
        prepare_params("local", {"submitit_folder": "f", "name": "n", "node": {"nproc_per_nod": 1}})
    with pytest.raises(ValueError, match="preempt_signal='USR2'"):
        prepare_params("local", {"submitit_folder": "f", "name": "n", "node": {"preempt_signal": "SIGUSR2"}})
