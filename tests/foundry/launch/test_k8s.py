"""`python -m foundry.launch.k8s`: the rendered PyTorchJob parses, passes the schema subset (CRD + webhook rules
of training-operator v1.9.0) and carries the replica counts, the launcher command and Secret-only credentials."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import yaml

from foundry.launch.k8s import (
    CONF_DIR,
    SCHEMA_FILE,
    job_name,
    load_k8s_config,
    main,
    render,
    validate_manifest,
)
from tests.foundry.checkpoint.runs import REPO

TRAIN = ["experiment=smoke-cpu", "trainer.max_duration=50ba", "checkpoint=s3"]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    out = tmp_path_factory.mktemp("k8s") / "job.yaml"
    rc = main(["--out", str(out), "k8s.image=reg.example.com/foundry:0.1", "k8s.nodes=4", "k8s.min_nodes=2",
               "k8s.max_nodes=6", "k8s.gpus_per_node=8", "k8s.env_from_secrets=[wandb]", *TRAIN,
               "run_name=MPT_125m.a"])  # fmt: skip
    assert rc == 0
    return yaml.safe_load(out.read_text())


def test_rendered_job_has_the_replicas_elastic_policy_and_launcher_command(manifest):
    validate_manifest(manifest)
    assert manifest["apiVersion"] == "kubeflow.org/v1" and manifest["kind"] == "PyTorchJob"
    assert manifest["metadata"]["name"] == "mpt-125m-a"
    spec = manifest["spec"]
    assert spec["elasticPolicy"] == {
        "rdzvBackend": "c10d",
        "minReplicas": 2,
        "maxReplicas": 6,
        "maxRestarts": 3,
    }
    assert spec["nprocPerNode"] == "8"
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    assert set(spec["pytorchReplicaSpecs"]) == {"Worker"}
    assert worker["replicas"] == 4 and worker["restartPolicy"] == "OnFailure"
    (container,) = worker["template"]["spec"]["containers"]
    assert container["name"] == "pytorch" and container["image"] == "reg.example.com/foundry:0.1"
    assert container["command"] == [
        "python", "-m", "foundry.launch", "--max-restarts=3", "--cuda", "--", "train.py", *TRAIN,
        "run_name=MPT_125m.a",
    ]  # fmt: skip
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}


def test_credentials_come_only_from_secrets(manifest):
    (container,) = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    by_name = {e["name"]: e for e in container["env"]}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert "value" not in by_name[name]
        assert by_name[name]["valueFrom"]["secretKeyRef"] == {
            "name": "foundry-store",
            "key": name,
            "optional": False,
        }
    assert container["envFrom"] == [{"secretRef": {"name": "wandb"}}]
    cfg = load_k8s_config("default", ["k8s.image=x", "k8s.env.WANDB_API_KEY=abc"])
    with pytest.raises(ValueError, match="k8s.env.WANDB_API_KEY: a credential as a plain value"):
        render(cfg, [], "r")
    with pytest.raises(ValueError, match="carries a credential"):
        render(
            load_k8s_config("default", ["k8s.image=x"]), ["+storage.profiles.a.secret_access_key=abc"], "r"
        )


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda m: m["spec"]["pytorchReplicaSpecs"]["Worker"].update(restartPolicy="Sometimes"), "restartPolicy"),
        (lambda m: m["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicaz=2), "Worker"),
        (lambda m: m["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=0), "replicas"),
        (lambda m: m["spec"]["pytorchReplicaSpecs"].update(Chief=m["spec"]["pytorchReplicaSpecs"]["Worker"]), "Chief"),
        (lambda m: m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(name="main"), "containers"),
        (lambda m: m["spec"]["elasticPolicy"].update(minReplicas="2"), "minReplicas"),
        (lambda m: m["metadata"].update(name="MPT_125m"), "name"),
        (lambda m: m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(memory="lots"), "memory"),
        (lambda m: m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"][0].update(valueFrom={"secretKeyRef": {"name": "s"}}), "key"),
    ],
    ids=["restart-policy", "unknown-field", "zero-replicas", "replica-type", "container-name", "int-field",
         "dns-name", "quantity", "secret-key-ref"],
)  # fmt: skip
def test_the_schema_subset_rejects_what_the_operator_would(manifest, mutate, where):
    bad = copy.deepcopy(manifest)
    mutate(bad)
    with pytest.raises(ValueError, match=where):
        validate_manifest(bad)


def test_schema_file_cites_its_source():
    schema = json.loads((CONF_DIR / SCHEMA_FILE).read_text())
    assert "training-operator tag v1.9.0" in schema["$comment"]


def test_bad_inputs_are_user_errors(capsys):
    assert main(["k8s.image=x", "k8s.nodez=3"]) == 2
    assert "nodez" in capsys.readouterr().err
    assert main(["k8s.image=x", "trainer.max_durationn=3"]) == 2
    assert "trainer.max_durationn" in capsys.readouterr().err
    assert main(["experiment=smoke-cpu"]) == 2
    assert "k8s.image is not set" in capsys.readouterr().err
    assert main(["k8s=nope", "k8s.image=x"]) == 2
    assert "k8s=nope" in capsys.readouterr().err
    assert main(["k8s.image=x", "k8s.nodes=2", "k8s.min_nodes=3"]) == 2
    assert "min_nodes (3) <= nodes (2)" in capsys.readouterr().err


@pytest.mark.parametrize(("run", "name"), [("quickstart", "quickstart"), ("My_Run.1", "my-run-1"), ("7b", "run-7b"),
                                           ("x" * 80, "x" * 63)])  # fmt: skip
def test_job_name_is_a_dns_label(run, name):
    assert job_name(run) == name


@pytest.mark.slow  # a fresh interpreter imports torch through foundry.config
def test_command_line_prints_yaml():
    out = subprocess.run([sys.executable, "-m", "foundry.launch.k8s", "k8s.image=x", "experiment=smoke-cpu"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
