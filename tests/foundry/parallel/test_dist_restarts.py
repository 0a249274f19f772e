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
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.dist]

SCRIPT = """
import json, os, sys
import torch
from foundry.launch.health import check_all_reduce
from foundry.parallel.config import ParallelismConfig
from foundry.parallel.dist import all_reduce_sum, init_distributed, teardown

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
health_store = check_all_reduce(attempt=attempt, timeout_s=30)
ctx = init_distributed(ParallelismConfig(strategy="ddp", backend="gloo"), device=torch.device("cpu"), timeout_s=60)
total = all_reduce_sum(torch.tensor([float(ctx.rank + 1)])).item()
if attempt == 0 and ctx.rank == 1:
    os._exit(1)
out = {"attempt": attempt, "total": total, "agent_store": os.environ["TORCHELASTIC_USE_AGENT_STORE"]}
(__import__("pathlib").Path(sys.argv[1]) / f"rank{ctx.rank}.json").write_text(json.dumps(out))
teardown(ctx)
"""

CLEAN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.mark.parametrize("share", ["0", "1"], ids=["agent-store", "fresh-store-per-round"])
def test_restarted_group_forms_again(tmp_path: Path, share: str) -> None:
    script = tmp_path / "group.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": share}
    for name in CLEAN:  # an outer torchrun's variables must not leak into the child
        env.pop(name, None)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--max-restarts=1",
        "--monitor-interval=0.2", str(script), str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    agent = "True" if share == "0" else "False"
    assert results == [{"attempt": 1, "total": 3.0, "agent_store": agent}] * 2
