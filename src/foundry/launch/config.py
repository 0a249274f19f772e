"""The launch tools' schemas: the `k8s` config group (`K8sConfig`, read by `python -m foundry.launch.k8s`) and
the per-node command of the Slurm launcher (`NodeCommandConfig`, `hydra.launcher.node`).

Design note: neither is part of the training config (`TrainConfig`): `foundry.launch.k8s` merges
`conf/k8s/<name>.yaml` and `k8s.<key>=<value>` overrides into `K8sConfig`, and `foundry.launch.slurm` checks
`hydra.launcher.node` against `NodeCommandConfig` inside its launcher schemas (`FoundrySlurmConf`,
`FoundryLocalConf`, which stay there: they extend the optional hydra-submitit-launcher's own). Plain
dataclasses, so reading them needs neither Kubernetes nor Slurm packages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["K8sConfig", "NodeCommandConfig", "SecretEnv"]


@dataclass
class SecretEnv:
    """One environment variable read from a Kubernetes Secret (`valueFrom.secretKeyRef`)."""

    name: str
    secret: str
    key: str
    optional: bool = False


@dataclass
class K8sConfig:
    """The `k8s` slice: what the PyTorchJob needs beyond the training config (see conf/k8s/default.yaml)."""

    image: str = "???"
    name: str | None = None
    """The PyTorchJob's name (DNS-1035); null: from run_name."""
    namespace: str | None = None
    image_pull_policy: str = "IfNotPresent"
    nodes: int = 1
    min_nodes: int | None = None
    """elasticPolicy.minReplicas (null: nodes): the job keeps running on this many nodes."""
    max_nodes: int | None = None
    """elasticPolicy.maxReplicas (null: nodes)."""
    gpus_per_node: int = 8
    nproc_per_node: int | None = None
    """Ranks per pod (null: gpus_per_node, at least 1)."""
    cpu: str | None = None
    memory: str | None = None
    shm_size: str = "32Gi"
    """/dev/shm (an in-memory emptyDir): DataLoader workers pass batches through it."""
    workdir: str = "/workspace"
    script: str = "train.py"
    launcher_args: list[str] = field(default_factory=lambda: ["--cuda"])
    max_restarts: int = 3
    """torchrun group restarts inside a pod (foundry.launch --max-restarts and elasticPolicy.maxRestarts)."""
    backoff_limit: int = 10
    """runPolicy.backoffLimit: pod restarts before the job is marked failed."""
    env: dict[str, str] = field(default_factory=dict)
    secret_env: list[SecretEnv] = field(default_factory=list)
    env_from_secrets: list[str] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    service_account: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class NodeCommandConfig:
    """What each node runs (`hydra.launcher.node`):
    `python -m foundry.launch <launcher_args> <torchrun> -- train.py`.

    Attributes:
        launcher_args: `foundry.launch` options, e.g. `[--max-restarts=3, --cuda]`.
        nproc_per_node: Ranks per node; `null` means `gpus_per_node` (1 when that is unset or 0).
        rdzv_backend: `c10d` (elastic, restarts across nodes) or `static` (`--node-rank`, `--master-addr`).
        rdzv_port: Port of the rendezvous store on the first node.
        preempt_signal: The job's preemption/time-limit signal (`TERM` or `USR1`: the trainer handles both).
        stop_grace_s: How long `checkpoint` waits for the launcher's preemption checkpoint before requeueing.
    """

    launcher_args: list[str] = field(default_factory=list)
    nproc_per_node: int | None = None
    rdzv_backend: str = "c10d"
    rdzv_port: int = 29400
    preempt_signal: str = "TERM"
    stop_grace_s: float = 120.0
