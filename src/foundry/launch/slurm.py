"""Slurm through Hydra's submitit launcher: one task per node runs `python -m foundry.launch ... -- train.py`.

Design note: `python train.py -m hydra/launcher=slurm ...` composes the config as usual and hands each job
of the (multi)run to `SlurmLauncher` (in `hydra_plugins.foundry_launcher`, where Hydra requires launchers to
live), a subclass of hydra-submitit-launcher's launcher: submitit writes the sbatch script (nodes, GPUs, time,
partition, account, qos), pickles the launcher with its `NodeRunner` and runs it once per node
(`tasks_per_node: 1`, under `srun`). This module holds the logic: the launcher schemas (the per-node keys,
`NodeCommandConfig`, are in `foundry.launch.config`), the per-node command and the runner. Unlike the stock
plugin, which would run the training function inside the submitit task, each task here starts the supervised
launcher as a child process with torchrun's rendezvous read from `SLURM_*` (`foundry.launch.rendezvous`), so
health checks, the hang watchdog, events.jsonl and group restarts are the same as on one machine.

Preemption and time limits use submitit's own mechanism. The job's preemption signal is SIGTERM
(`SUBMITIT_PREEMPT_SIGNAL=TERM`, exported by the sbatch script; `--signal=TERM@<signal_delay_s>` before the
time limit): SIGTERM is what Slurm sends on preemption too, the trainer turns it into a checkpoint at the next
step boundary and exit 75, and torchrun's agent forwards it to its ranks (submitit's default, USR2, would kill
the agent). Slurm signals every process of the step; submitit's handler in the task then calls `checkpoint`,
which waits (up to `stop_grace_s`) for the launcher to finish its preemption checkpoint before returning the
resubmission, and submitit requeues the job (`scontrol requeue`; the local executor restarts the task). The
requeued job runs the same command with the same `run_name` and autoresumes. A launcher that exits 75 on its
own (a rank got the signal alone) triggers the same path: the task signals itself. Under the local executor
only the task is signalled, so `checkpoint` forwards the signal to the launcher.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf
from omegaconf import OmegaConf

from foundry.launch.config import NodeCommandConfig
from foundry.launch.rendezvous import placement_from_env, torchrun_options
from foundry.rundir.layout import OUTPUTS, RunDir
from foundry.train.preemption import REQUEUE_EXIT_CODE
from stackbase.process import pid_alive

__all__ = ["NodeCommandConfig", "NodeRunner", "node_command", "prepare_params", "run_names"]

PREEMPT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"


@dataclass
class FoundrySlurmConf(SlurmQueueConf):
    """hydra-submitit-launcher's Slurm schema plus `node` (validated when the launcher is built)."""

    node: NodeCommandConfig = field(default_factory=NodeCommandConfig)


@dataclass
class FoundryLocalConf(LocalQueueConf):
    """The local executor's schema (one node, tests) plus the keys this launcher uses from Slurm's."""

    node: NodeCommandConfig = field(default_factory=NodeCommandConfig)
    max_num_timeout: int = 3
    setup: list[str] | None = None


def node_command(
    python: str, launcher_args: list[str], torchrun: list[str], script: str, overrides: list[str]
) -> list[str]:
    """The per-node command line: the supervised launcher around torchrun around the training script."""
    return [python, "-m", "foundry.launch", *launcher_args, *torchrun, "--", script, *overrides]


def run_names(job_overrides: list[list[str]], base: str) -> list[str]:
    """Each job's `run_name`: its own `run_name=` override, else `base`
    (`base-<i>` when several jobs share it)."""
    names = []
    for i, overrides in enumerate(job_overrides):
        own = [o.split("=", 1)[1] for o in overrides if o.startswith("run_name=")]
        names.append(own[-1] if own else base if len(job_overrides) == 1 else f"{base}-{i}")
    return names


def prepare_params(executor: str, params: dict[str, Any]) -> tuple[dict[str, Any], NodeCommandConfig]:
    """The launcher's keys checked against the schema (a typo fails here, naming it, before any submission),
    split into submitit's parameters (with the preemption signal wired in) and the per-node command config."""
    schema = FoundrySlurmConf if executor == "slurm" else FoundryLocalConf
    given = {k: v for k, v in params.items() if k != "_target_"}
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), given)
        out = OmegaConf.to_container(merged, resolve=True)
    except Exception as e:
        # omegaconf's ConfigKeyError / ValidationError name the key
        names = ", ".join(f.name for f in dataclasses.fields(schema))
        raise ValueError(f"hydra.launcher: {e}\n(the {executor} launcher's keys: {names})") from e
    assert isinstance(out, dict)
    sub = {str(k): v for k, v in out.items() if k not in ("_target_", "node")}
    node = NodeCommandConfig(**out["node"])
    sig = node.preempt_signal.upper().removeprefix("SIG")
    if sig not in ("TERM", "USR1"):
        raise ValueError(
            f"hydra.launcher.node.preempt_signal={sig!r}: the trainer checkpoints on TERM or USR1"
        )
    node.preempt_signal = sig
    sub["setup"] = [f"export {PREEMPT_SIGNAL_ENV}={sig}", *(sub.get("setup") or [])]
    # the sbatch `--signal` line (submitit writes USR2@<delay> otherwise)
    if executor == "slurm":
        extra = dict(sub.get("additional_parameters") or {})
        # --requeue: eligible for `scontrol requeue` and PreemptMode=REQUEUE even where JobRequeue=0
        sub["additional_parameters"] = {"requeue": True, **extra, "signal": f"{sig}@{sub['signal_delay_s']}"}
    return sub, node


@dataclass
class NodeRunner:
    """The node side of a job, pickled inside the launcher: runs the launcher, stops it for a requeue."""

    node: NodeCommandConfig
    local: bool
    gpus_per_node: int = 0
    cwd: str = "."
    script: str = "train.py"
    run_names: dict[int, str] = field(default_factory=dict)
    _proc: subprocess.Popen | None = None

    def __getstate__(self) -> dict[str, Any]:
        # a running child is not part of the resubmission
        return {**self.__dict__, "_proc": None}

    @property
    def stop_signal(self) -> signal.Signals:
        return signal.Signals[f"SIG{self.node.preempt_signal}"]

    def bind(self, cwd: str, script: str, job_overrides: list[list[str]], base_name: str, first: int) -> None:
        """Submitter side: the working directory, the script and each job's run_name."""
        self.cwd, self.script = cwd, str(Path(script).resolve())
        names = run_names(job_overrides, base_name)
        self.run_names = {first + i: n for i, n in enumerate(names)}

    def command(self, sweep_overrides: list[str], job_num: int, env: dict[str, str]) -> tuple[list[str], str]:
        """This node's command line and the job's run_name."""
        placement = placement_from_env(env, hostname=socket.gethostname())
        nproc = self.node.nproc_per_node or max(self.gpus_per_node, 1)
        torchrun = torchrun_options(
            placement, nproc_per_node=nproc, backend=self.node.rdzv_backend, port=self.node.rdzv_port
        )
        name = self.run_names.get(job_num) or run_names([sweep_overrides], "quickstart")[0]
        overrides = [*(o for o in sweep_overrides if not o.startswith("run_name=")), f"run_name={name}"]
        return node_command(sys.executable, self.node.launcher_args, torchrun, self.script, overrides), name

    def run(self, sweep_overrides: list[str], job_num: int, global_rank: int) -> JobReturn:
        """Runs the launcher to its end; exit 75 asks submitit to requeue (see the module note)."""
        cmd, name = self.command(sweep_overrides, job_num, dict(os.environ))
        print(f"foundry slurm: {' '.join(cmd)}", flush=True)
        self._proc = subprocess.Popen(cmd, cwd=self.cwd)
        while (rc := self._proc.poll()) is None:
            time.sleep(0.2)
        run_dir = str(RunDir.named(name, outputs=Path(self.cwd) / OUTPUTS).root)
        if rc == REQUEUE_EXIT_CODE:
            self._ask_for_requeue(global_rank)
        ret = JobReturn(overrides=cmd[cmd.index("--") + 2 :], working_dir=run_dir, task_name="train")
        ret.status, ret.return_value = JobStatus.COMPLETED, run_dir
        if rc != 0:
            ret.status = JobStatus.FAILED
            ret.return_value = RuntimeError(f"{' '.join(cmd)} exited with {rc}; see {run_dir}/events.jsonl")
        return ret

    def _ask_for_requeue(self, global_rank: int) -> None:
        """The launcher stopped for a requeue: submitit's own handler requeues (task 0) when signalled."""
        if not callable(signal.getsignal(self.stop_signal)):
            # not inside a submitit task (no handler): reported as a failure with exit code 75
            return
        print(f"foundry slurm: launcher exited {REQUEUE_EXIT_CODE}; asking submitit to requeue", flush=True)
        # task 0's handler exits this process (requeue)
        os.kill(os.getpid(), self.stop_signal)
        # others wait for the requeue
        time.sleep(1.0 if global_rank == 0 else self.node.stop_grace_s)

    def stop_for_requeue(self) -> None:
        """From submitit's signal handler: wait (up to `stop_grace_s`) for the preemption checkpoint."""
        proc = self._proc
        if proc is None or not pid_alive(proc.pid):
            return
        # Slurm signals every process of the step itself; the local executor only the task
        if self.local:
            proc.send_signal(self.stop_signal)
        deadline = time.monotonic() + self.node.stop_grace_s
        while pid_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        state = "still running" if pid_alive(proc.pid) else "stopped"
        print(f"foundry slurm: launcher {state} after {self.stop_signal.name}; requeueing", flush=True)
