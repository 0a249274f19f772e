"""Writes conf/k8s/pytorchjob-v1.schema.json: the PyTorchJob fields `foundry.launch.k8s` renders, cut from the
Kubeflow training operator's CRD, plus the operator's webhook rules (the CRD alone does not carry them).

    python scripts/k8s_schema_subset.py kubeflow.org_pytorchjobs.yaml [--source-note "training-operator v1.9.0 ..."]

Every kept object gets `additionalProperties: false` (stricter than the API server, which silently drops an
unknown field: a misspelt field fails here instead of vanishing in the cluster).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parents[1] / "conf" / "k8s" / "pytorchjob-v1.schema.json"
_ENV = {"name": {}, "value": {}, "valueFrom": {"secretKeyRef": {"name": {}, "key": {}, "optional": {}}}}
_CONTAINER = {
    "name": {}, "image": {}, "imagePullPolicy": {}, "command": {}, "args": {}, "workingDir": {}, "env": _ENV,
    "envFrom": {"secretRef": {"name": {}, "optional": {}}}, "resources": {"limits": {}, "requests": {}},
    "volumeMounts": {"name": {}, "mountPath": {}, "readOnly": {}},
}  # fmt: skip
KEEP: dict[str, Any] = {
    "apiVersion": {}, "kind": {}, "metadata": {},
    "spec": {
        "nprocPerNode": {},
        "runPolicy": {"backoffLimit": {}, "cleanPodPolicy": {}, "ttlSecondsAfterFinished": {}, "suspend": {}},
        "elasticPolicy": {"minReplicas": {}, "maxReplicas": {}, "maxRestarts": {}, "rdzvBackend": {}, "rdzvPort": {}},
        "pytorchReplicaSpecs": {"*": {
            "replicas": {}, "restartPolicy": {},
            "template": {"metadata": {}, "spec": {
                "containers": _CONTAINER, "volumes": {"name": {}, "emptyDir": {"medium": {}, "sizeLimit": {}}},
                "nodeSelector": {}, "serviceAccountName": {},
            }},
        }},
    },
}  # fmt: skip


def prune(schema: dict[str, Any], keep: dict[str, Any]) -> dict[str, Any]:
    """`schema` restricted to the properties in `keep` (recursively; lists descend into `items`)."""
    out = {
        k: v
        for k, v in schema.items()
        if k not in ("properties", "items", "description", "additionalProperties")
    }
    if not keep:
        return {k: v for k, v in schema.items() if k != "description"} if "properties" not in schema else out
    if schema.get("type") == "array":
        out["items"] = prune(schema["items"], keep)
        return out
    if "*" in keep:  # a map: every value has the same schema
        out["additionalProperties"] = prune(schema["additionalProperties"], keep["*"])
        return out
    props = schema.get("properties", {})
    missing = sorted(set(keep) - set(props))
    if missing:
        raise SystemExit(f"the CRD has no {missing} (under {sorted(props)})")
    out["properties"] = {k: prune(props[k], keep[k]) for k in keep}
    if "required" in schema:
        out["required"] = [r for r in schema["required"] if r in keep]
    out["additionalProperties"] = False
    return out


def webhook_rules(schema: dict[str, Any]) -> None:
    """The training operator's validating webhook (pkg/webhooks/pytorch/pytorchjob_webhook.go), as JSON Schema."""
    schema["properties"]["apiVersion"]["const"] = "kubeflow.org/v1"
    schema["properties"]["kind"]["const"] = "PyTorchJob"
    schema["properties"]["metadata"] = {
        "type": "object", "required": ["name"],
        "properties": {"name": {"type": "string", "maxLength": 63, "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$"}},
    }  # fmt: skip
    spec = schema["properties"]["spec"]
    replicas = spec["properties"]["pytorchReplicaSpecs"]
    replicas["propertyNames"] = {"enum": ["Master", "Worker"]}
    replica = replicas["additionalProperties"]
    replica["properties"]["restartPolicy"]["enum"] = ["Always", "OnFailure", "Never", "ExitCode"]
    replica["properties"]["replicas"]["minimum"] = 1
    replica["required"] = ["template"]
    pod = replica["properties"]["template"]["properties"]["spec"]
    pod["required"] = ["containers"]
    containers = pod["properties"]["containers"]
    containers["minItems"] = 1
    containers["contains"] = {
        "type": "object",
        "properties": {"name": {"const": "pytorch"}},
        "required": ["name"],
    }
    containers["items"]["required"] = ["name", "image"]
    containers["items"]["properties"]["image"]["minLength"] = 1
    spec["if"] = {"required": ["elasticPolicy"]}
    spec["then"] = {"properties": {"pytorchReplicaSpecs": {"required": ["Worker"]}}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("crd", type=Path)
    p.add_argument("--source-note", default="")
    args = p.parse_args()
    crd = yaml.safe_load(args.crd.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = prune(version["schema"]["openAPIV3Schema"], KEEP)
    webhook_rules(schema)
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"Generated by scripts/k8s_schema_subset.py from {args.source_note or args.crd.name}",
        **schema,
    }
    OUT.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
