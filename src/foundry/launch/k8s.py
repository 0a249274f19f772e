"""`python -m foundry.launch.k8s [k8s=<name>] [k8s.<key>=<value> ...] <train.py overrides>`: a PyTorchJob.

Design note: Kubernetes runs the job through the Kubeflow training operator's `PyTorchJob` (kubeflow.org/v1),
never a controller of our own. The manifest is rendered, not templated: the training overrides are composed
first with the same config tree as `train.py` (a typo fails here, not in a pod), the `k8s` slice is its own
typed schema (`K8sConfig` in `foundry.launch.config`, from `conf/k8s/<name>.yaml`; it is not part of the
training config), and the result is checked against `conf/k8s/pytorchjob-v1.schema.json` (a subset of the
operator's CRD schema and webhook rules; see `scripts/k8s_schema_subset.py`). Each Worker pod runs the
supervised launcher (`python -m foundry.launch ... -- train.py <overrides> run_name=<name>`) with no
rendezvous options: under `elasticPolicy` the operator sets torchrun's `PET_NNODES` (min:max), `PET_RDZV_*`
and `PET_NPROC_PER_NODE`, which torchrun reads as its defaults. `restartPolicy: OnFailure` restarts a
container that exited non-zero (75 after a preemption checkpoint included) and it autoresumes from the
checkpoint store. Credentials only ever come from Secrets (`secret_env`, `env_from_secrets`); a plain env
value or a training override that looks like a credential is refused.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from foundry.launch.config import K8sConfig, SecretEnv
from stackbase.secrets import is_secret_key, redact_text

__all__ = ["K8sConfig", "SecretEnv", "job_name", "load_k8s_config", "main", "render", "validate_manifest"]

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
SCHEMA_FILE = "k8s/pytorchjob-v1.schema.json"


def load_k8s_config(source: str, overrides: list[str], conf_dir: Path = CONF_DIR) -> K8sConfig:
    """`conf/k8s/<source>.yaml` (or a path) merged with `k8s.<key>=<value>` overrides into `K8sConfig`."""
    path = Path(source) if source.endswith((".yaml", ".yml")) else conf_dir / "k8s" / f"{source}.yaml"
    if not path.exists():
        choices = sorted(p.stem for p in (conf_dir / "k8s").glob("*.yaml"))
        raise ValueError(f"k8s={source}: no {path} (choices: {', '.join(choices)})")
    dotlist = [o.removeprefix("k8s.") for o in overrides]
    try:
        merged = OmegaConf.merge(
            OmegaConf.structured(K8sConfig), OmegaConf.load(path), OmegaConf.from_dotlist(dotlist)
        )
    except OmegaConfBaseException as e:
        # names the key and the expected type
        raise ValueError(f"k8s ({path}): {e}") from e
    missing = sorted(OmegaConf.missing_keys(merged))
    if missing:
        raise ValueError(
            f"k8s.{missing[0]} is not set (k8s.{missing[0]}=...; image: one with this repo installed)"
        )
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, K8sConfig)
    return cfg


def job_name(run_name: str) -> str:
    """`run_name` as a DNS-1035 label (lower case, `-` for anything else, starts with a letter, <= 63)."""
    name = re.sub(r"[^a-z0-9-]+", "-", run_name.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"run-{name}".rstrip("-")
    return name[:63].rstrip("-")


def _check_no_inline_secrets(cfg: K8sConfig, overrides: list[str]) -> None:
    for key, value in cfg.env.items():
        if is_secret_key(key) or redact_text(f"{key}={value}") != f"{key}={value}":
            raise ValueError(
                f"k8s.env.{key}: a credential as a plain value; put it in a Secret (k8s.secret_env)"
            )
    for o in overrides:
        if redact_text(o) != o:
            raise ValueError(
                f"override {redact_text(o)!r} carries a credential: it would be stored in the manifest; "
                "put it in a Secret (k8s.secret_env) and read it from the environment"
            )


def _container(cfg: K8sConfig, command: list[str]) -> dict[str, Any]:
    env: list[dict[str, Any]] = [{"name": k, "value": str(v)} for k, v in cfg.env.items()]
    env += [
        {
            "name": s.name,
            "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key, "optional": s.optional}},
        }
        for s in cfg.secret_env
    ]
    limits: dict[str, Any] = {"nvidia.com/gpu": cfg.gpus_per_node} if cfg.gpus_per_node else {}
    limits |= {k: v for k, v in (("cpu", cfg.cpu), ("memory", cfg.memory)) if v is not None}
    container: dict[str, Any] = {
        # the operator requires a container of this name
        "name": "pytorch",
        "image": cfg.image,
        "imagePullPolicy": cfg.image_pull_policy,
        "workingDir": cfg.workdir,
        "command": command,
        "env": env,
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if cfg.env_from_secrets:
        container["envFrom"] = [{"secretRef": {"name": s}} for s in cfg.env_from_secrets]
    return container


def render(cfg: K8sConfig, overrides: list[str], run_name: str) -> dict[str, Any]:
    """The PyTorchJob for `train.py <overrides> run_name=<run_name>` on `cfg.nodes` pods."""
    if not cfg.image:
        raise ValueError("k8s.image is not set: the container image with this repository installed")
    _check_no_inline_secrets(cfg, overrides)
    lo, hi = cfg.min_nodes or cfg.nodes, cfg.max_nodes or cfg.nodes
    if not 1 <= lo <= cfg.nodes <= hi:
        raise ValueError(f"k8s: need 1 <= min_nodes ({lo}) <= nodes ({cfg.nodes}) <= max_nodes ({hi})")
    train = [o for o in overrides if not o.startswith("run_name=")]
    command = [
        "python", "-m", "foundry.launch", f"--max-restarts={cfg.max_restarts}", *cfg.launcher_args,
        "--", cfg.script, *train, f"run_name={run_name}",
    ]  # fmt: skip
    name = cfg.name or job_name(run_name)
    labels = {"app.kubernetes.io/name": "foundry", "foundry/run-name": job_name(run_name), **cfg.labels}
    pod_spec: dict[str, Any] = {
        "containers": [_container(cfg, command)],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": cfg.shm_size}}],
    }
    if cfg.node_selector:
        pod_spec["nodeSelector"] = dict(cfg.node_selector)
    if cfg.service_account:
        pod_spec["serviceAccountName"] = cfg.service_account
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if cfg.namespace:
        metadata["namespace"] = cfg.namespace
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": {
            "nprocPerNode": str(cfg.nproc_per_node or max(cfg.gpus_per_node, 1)),
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "minReplicas": lo,
                "maxReplicas": hi,
                "maxRestarts": cfg.max_restarts,
            },  # fmt: skip
            "runPolicy": {"backoffLimit": cfg.backoff_limit},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": cfg.nodes,
                    "restartPolicy": "OnFailure",
                    "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
                }
            },
        },
    }


def validate_manifest(manifest: dict[str, Any], conf_dir: Path = CONF_DIR) -> None:
    """Checks `manifest` against the schema subset; raises ValueError naming the first bad field."""
    # optional (the k8s/dev extras): only this check needs it
    import jsonschema

    schema = json.loads((conf_dir / SCHEMA_FILE).read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(manifest), key=lambda e: list(e.path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
        raise ValueError(
            f"PyTorchJob {where}: {errors[0].message} ({len(errors)} error(s); schema {SCHEMA_FILE})"
        )


def compose_run_name(overrides: list[str], conf_dir: Path = CONF_DIR) -> str:
    """Composes the training config like `train.py` (unknown keys and bad values fail here); its run_name,
    chosen here once when the overrides name none (`foundry.run_name`), so every pod and restart shares it."""
    from foundry.launch.compose import compose_run_name as compose

    return compose(overrides, conf_dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m foundry.launch.k8s",
        usage="python -m foundry.launch.k8s [--out FILE] [k8s=NAME] [k8s.KEY=VALUE ...] [train.py overrides]",
        description=(
            "Renders a Kubeflow PyTorchJob (kubeflow.org/v1) that runs train.py under foundry.launch."
        ),
    )
    p.add_argument("--out", type=Path, help="write the manifest here (default: stdout)")
    p.add_argument(
        "--conf-dir", type=Path, default=CONF_DIR, help="the config tree (default: the repo's conf/)"
    )
    p.add_argument("--no-check", action="store_true", help="skip the schema check (needs jsonschema)")
    args, rest = p.parse_known_args(argv)
    source = next((a.split("=", 1)[1] for a in rest if a.startswith("k8s=")), "default")
    k8s_overrides = [a for a in rest if a.startswith("k8s.")]
    train = [a for a in rest if not a.startswith(("k8s=", "k8s."))]
    try:
        cfg = load_k8s_config(source, k8s_overrides, args.conf_dir)
        run_name = compose_run_name(train, args.conf_dir)
        manifest = render(cfg, train, run_name)
        if not args.no_check:
            validate_manifest(manifest, args.conf_dir)
    except (ValueError, HydraException, OmegaConfBaseException) as e:
        # the user's to fix: print plainly
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = yaml.safe_dump(manifest, sort_keys=False, width=1000)
    if args.out:
        args.out.write_text(text)
        print(
            f"wrote {args.out} (PyTorchJob {manifest['metadata']['name']}, {cfg.nodes} pod(s))",
            file=sys.stderr,
        )
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
