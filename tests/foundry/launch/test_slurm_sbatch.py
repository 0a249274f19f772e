"""The submission side of `hydra/launcher=slurm`: the sbatch script submitit writes from our config.

There is no Slurm here: `sbatch` on PATH is a shell script that keeps a copy of the script it is given and
prints a job id, `srun` exists only for submitit's "am I on a cluster" check, and `sacct` answers nothing
useful, so the submitter is stopped once the script is written. What runs is the real `train.py -m`, Hydra,
hydra-submitit-launcher, our launcher's parameter wiring and submitit's own sbatch rendering.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.foundry.checkpoint.runs import REPO, TINY, env_for

pytestmark = pytest.mark.slow

FAKE_SBATCH = """#!/bin/sh
for a; do last="$a"; done
cp "$last" "$FAKE_SBATCH_COPY"
echo "Submitted batch job 4242"
"""


def test_sbatch_script_has_nodes_signal_requeue_and_one_task_per_node(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [("sbatch", FAKE_SBATCH), ("srun", "#!/bin/sh\nexit 0\n"), ("sacct", "#!/bin/sh\n")]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    copy = tmp_path / "job.sh"
    env = env_for(tmp_path / "cache", PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_SBATCH_COPY=str(copy))
    cmd = [
        sys.executable, str(REPO / "train.py"), "-m", "hydra/launcher=slurm", "hydra.launcher.nodes=2",
        "hydra.launcher.partition=gpu", "hydra.launcher.account=acct", "hydra.launcher.qos=high",
        "hydra.launcher.timeout_min=600", *TINY, "run_name=sb",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 240
        while not copy.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # it would poll sacct for a job that never runs
        out = proc.communicate()[0].decode(errors="replace")
    assert copy.exists(), out[-5000:]
    script = copy.read_text()
    for line in [
        "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu", "#SBATCH --account=acct", "#SBATCH --qos=high", "#SBATCH --time=600",
        "#SBATCH --signal=TERM@300", "#SBATCH --requeue", "#SBATCH --job-name=sb",
        "export SUBMITIT_PREEMPT_SIGNAL=TERM",
    ]:  # fmt: skip
        assert line in script.splitlines(), f"{line!r} not in\n{script}"
    srun = [x for x in script.splitlines() if x.startswith("srun ")]
    assert len(srun) == 1 and "-m submitit.core._submit" in srun[0], script
    assert script.index("export SUBMITIT_PREEMPT_SIGNAL=TERM") < script.index("srun ")
