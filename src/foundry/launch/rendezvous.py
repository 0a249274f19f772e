"""Where this node sits in a multi-node job, read from the scheduler's environment, as torchrun options.

Design note: pure functions only (an environment mapping in, options out), so every scheduler path is unit
tested without a cluster. A node runs one `python -m foundry.launch` (one Slurm task per node), which runs
one torchrun agent with `--nproc-per-node` ranks. Across nodes the default rendezvous is torchrun's `c10d`
backend (`--rdzv-endpoint=<first node>:<port> --rdzv-id=<job id>`): the first node's agent hosts the store and
ranks are assigned at each rendezvous, so the group restarts of `--max-restarts` work across nodes (torchrun
recommends it for multi-node). `static` is the fixed alternative: `--node-rank=$SLURM_NODEID` and
`--master-addr=<first node>`; torchrun ignores `--node-rank` with any other backend, so it is only emitted
there. One node needs no rendezvous host at all: `--standalone` (torchrun picks a free local port).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["RDZV_BACKENDS", "Placement", "expand_nodelist", "placement_from_env", "torchrun_options"]

RDZV_BACKENDS = ("c10d", "static")
_GROUP = re.compile(r"([^,\[]*)(?:\[([^\]]*)\])?(.*)")


@dataclass(frozen=True)
class Placement:
    """This node's place in the job: node count, its rank, every node's host name (rank order), the job id."""

    num_nodes: int
    node_rank: int
    hosts: tuple[str, ...]
    job_id: str

    @property
    def master(self) -> str:
        """The first node: it hosts the rendezvous store."""
        return self.hosts[0]


def _expand_ranges(ranges: str, spec: str) -> list[str]:
    out: list[str] = []
    for part in ranges.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"SLURM_JOB_NODELIST={spec!r}: bad range {part!r} (expected N or N-M)")
        if not dash:
            out.append(low)
            continue
        if int(high) < int(low):
            raise ValueError(f"SLURM_JOB_NODELIST={spec!r}: range {part!r} runs backwards")
        out.extend(f"{n:0{len(low)}d}" for n in range(int(low), int(high) + 1))
    return out


def _expand_host(group: str, spec: str) -> list[str]:
    """One comma-free host pattern, possibly with several bracket groups: `a[1-2]b[3,5]`."""
    m = _GROUP.fullmatch(group)
    # the pattern matches any string
    assert m is not None
    prefix, ranges, rest = m.groups()
    if ranges is None:
        if "]" in group:
            raise ValueError(f"SLURM_JOB_NODELIST={spec!r}: unbalanced ']' in {group!r}")
        return [group]
    suffixes = _expand_host(rest, spec) if rest else [""]
    return [prefix + n + s for n in _expand_ranges(ranges, spec) for s in suffixes]


def expand_nodelist(spec: str) -> list[str]:
    """Slurm's compressed host list (`gpu[01-03,07],login5`) as host names, in Slurm's order."""
    groups: list[str] = []
    depth, start = 0, 0
    for i, c in enumerate(spec):
        depth += (c == "[") - (c == "]")
        if depth not in (0, 1):
            raise ValueError(f"SLURM_JOB_NODELIST={spec!r}: nested or unbalanced brackets")
        if c == "," and depth == 0:
            groups.append(spec[start:i])
            start = i + 1
    groups.append(spec[start:])
    if depth or any(not g for g in groups):
        raise ValueError(f"SLURM_JOB_NODELIST={spec!r}: empty host name or unclosed '['")
    return [host for g in groups for host in _expand_host(g, spec)]


def _int(env: Mapping[str, str], *names: str) -> int:
    for name in names:
        if env.get(name, "").strip():
            try:
                return int(env[name])
            except ValueError:
                raise ValueError(f"{name}={env[name]!r} is not an integer") from None
    raise ValueError(f"none of {', '.join(names)} is set: not inside a Slurm job step (run it with srun)")


def placement_from_env(env: Mapping[str, str], *, hostname: str) -> Placement:
    """From `SLURM_*` inside a Slurm step; a single node (`hostname`) under submitit's local executor."""
    if "SLURM_JOB_ID" not in env:
        job = env.get("SUBMITIT_LOCAL_JOB_ID") or "local"
        return Placement(num_nodes=1, node_rank=0, hosts=(hostname,), job_id=job)
    num_nodes = _int(env, "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    node_rank = _int(env, "SLURM_NODEID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    hosts = tuple(expand_nodelist(nodelist)) if nodelist else ()
    if len(hosts) != num_nodes:
        raise ValueError(
            f"SLURM_JOB_NODELIST={nodelist!r} names {len(hosts)} hosts but the job has {num_nodes}"
        )
    if not 0 <= node_rank < num_nodes:
        raise ValueError(f"SLURM_NODEID={node_rank} is outside 0..{num_nodes - 1}")
    job_id = env["SLURM_JOB_ID"]
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        job_id = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return Placement(num_nodes=num_nodes, node_rank=node_rank, hosts=hosts, job_id=job_id)


def torchrun_options(
    p: Placement, *, nproc_per_node: int, backend: str = "c10d", port: int = 29400
) -> list[str]:
    """torchrun's options for this node (see the module note for the choice of rendezvous)."""
    if nproc_per_node < 1:
        raise ValueError(f"nproc_per_node={nproc_per_node}: each node runs at least one rank")
    if backend not in RDZV_BACKENDS:
        raise ValueError(f"rdzv_backend={backend!r}: expected one of {', '.join(RDZV_BACKENDS)}")
    if p.num_nodes == 1:
        return ["--standalone", "--nnodes=1", f"--nproc-per-node={nproc_per_node}"]
    common = [f"--nnodes={p.num_nodes}", f"--nproc-per-node={nproc_per_node}"]
    if backend == "static":
        return [*common, f"--node-rank={p.node_rank}", f"--master-addr={p.master}", f"--master-port={port}"]
    return [*common, "--rdzv-backend=c10d", f"--rdzv-endpoint={p.master}:{port}", f"--rdzv-id={p.job_id}"]
