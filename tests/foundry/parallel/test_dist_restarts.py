"""`init_distributed` across torchrun group restarts, with torchrun's shared agent store and without it.

A plain `torchrun --standalone --nproc-per-node=2 --max-restarts=1` runs a small script: the launcher's
health all-reduce (`check_all_reduce`, its store kept alive as the worker keeps it), then the default group
from `init_distributed` and one all-reduce; on the first attempt rank 1 dies after the group formed (its keys
are in the store), so the restarted group must not read them. Under the shared agent store the default
group's keys carry `TORCHELASTIC_RESTART_COUNT`; with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` (what
`python -m foundry.launch` sets) each round has a fresh store hosted by rank 0, which the health check's
store and the group's `env://` store share.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.dist]

SCRIPT = """
import json, os, sys, time, warnings
from pathlib import Path
import torch
from foundry.launch.health import check_all_reduce
from foundry.parallel.config import ParallelismConfig
from foundry.parallel.dist import SHARED_STORE_WARNING, all_reduce_sum, init_distributed, teardown

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
crashed = Path(sys.argv[1]) / "crashed"
first = not crashed.exists()  # the first round of the run (a node's restart count need not move)
health_store = check_all_reduce(attempt=attempt, timeout_s=30)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    cfg = ParallelismConfig(strategy="ddp", backend="gloo")
    ctx = init_distributed(cfg, device=torch.device("cpu"), timeout_s=60)
total = all_reduce_sum(torch.tensor([float(ctx.rank + 1)])).item()
if first and ctx.rank == 1:
    crashed.touch()
    os._exit(1)
if first:  # the other ranks wait to be restarted (a 2nd collective would fail them: a counted restart)
    time.sleep(120)
    sys.exit("not restarted within 120 s")
out = {"total": total, "agent_store": os.environ["TORCHELASTIC_USE_AGENT_STORE"], "attempt": attempt}
out["warned"] = any(str(w.message) == SHARED_STORE_WARNING for w in seen)
(Path(sys.argv[1]) / f"rank{ctx.rank}.json").write_text(json.dumps(out))
teardown(ctx)
"""

CLEAN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _env(share: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": share}
    for name in CLEAN:  # an outer torchrun's variables must not leak into the child
        env.pop(name, None)
    return env


def _results(folder: Path) -> list[dict]:
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.parametrize("share", ["0", "1"], ids=["agent-store", "fresh-store-per-round"])
def test_restarted_group_forms_again(tmp_path: Path, share: str) -> None:
    script = tmp_path / "group.py"
    script.write_text(SCRIPT)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--max-restarts=1",
        "--monitor-interval=0.2", str(script), str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=_env(share), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    agent = "True" if share == "0" else "False"
    assert _results(tmp_path) == [{"total": 3.0, "agent_store": agent, "warned": False, "attempt": 1}] * 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_crash_on_one_of_two_nodes_with_a_fresh_store_per_round(tmp_path: Path) -> None:
    """Two agents (nodes) of one rank each: node B's rank dies; B counts a restart, A does not (issue 16).

    With a fresh store per round the health check and the default group meet anyway.
    """
    script = tmp_path / "group.py"
    script.write_text(SCRIPT)
    port = _free_port()
    procs = []
    for node, conf in (("a", ""), ("b", ",is_host=false")):
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--max-restarts=2",
            "--monitor-interval=0.2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=dist-restarts", f"--rdzv-conf=last_call_timeout=1{conf}", str(script), str(tmp_path),
        ]  # fmt: skip
        log = (tmp_path / f"{node}.log").open("w")
        procs.append(subprocess.Popen(cmd, env=_env("1"), stdout=log, stderr=subprocess.STDOUT))
    codes = [p.wait(timeout=300) for p in procs]
    logs = "".join((tmp_path / f"{n}.log").read_text()[-3000:] for n in "ab")
    assert codes == [0, 0], logs
    assert (tmp_path / "crashed").exists()
    results = _results(tmp_path)
    assert sorted(r.pop("attempt") for r in results) == [0, 1]  # the nodes' restart counts differ
    assert results == [{"total": 3.0, "agent_store": "False", "warned": False}] * 2


def test_several_nodes_restarting_under_the_shared_agent_store_are_warned(tmp_path: Path) -> None:
    script = tmp_path / "group.py"
    script.write_text(SCRIPT.replace("first = not crashed.exists()", "first = False"))  # no crash
    port = _free_port()
    procs = []
    for conf in ("", ",is_host=false"):
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--max-restarts=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=dist-warn",
            f"--rdzv-conf=last_call_timeout=1{conf}", str(script), str(tmp_path),
        ]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=_env("0"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], b"".join(outs)[-5000:]
    assert _results(tmp_path) == [{"total": 3.0, "agent_store": "True", "warned": True, "attempt": 0}] * 2
