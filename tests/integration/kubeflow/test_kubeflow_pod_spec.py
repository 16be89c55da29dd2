"""What a job on a real cluster needs in its spec (issues 46 and 47 item 5), through the real
CLI against the stand-in API server: `submit --dry-run` shows the pod keys in the TrainJob's
runtimePatches, in the namespace the real submit uses; a real `submit` creates that TrainJob
(the stand-in validates it against Trainer v2.3.0's CRD), and the stand-in Trainer, applying
the patch as Trainer does, makes a JobSet (validated against JobSet's CRD) and pods that carry
them. A bad key is exit 2 naming every problem, nothing recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from kube_fake import FakeApiServer
from kube_fake import trainer as tr

SPEC: dict[str, Any] = {
    "name": "pods-on-real-nodes",
    "backend": "kubeflow",
    "nodes": 2,
    "command": ["python", "train.py"],
    "kubeflow": {
        "runtime": "torch-distributed",
        "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}},
        "node_selector": {"gpu": "h100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                         "effect": "NoSchedule"}],
        "volumes": [{"host_path": "/datasets", "mount_path": "/data", "read_only": True},
                    {"pvc": "checkpoints", "mount_path": "/ckpt"}],
        "service_account": "trainer",
        "image_pull_secrets": ["regcred"],
    },
}
POD = {
    "nodeSelector": {"gpu": "h100"},
    "tolerations": [{"operator": "Exists", "key": "nvidia.com/gpu", "effect": "NoSchedule"}],
    "serviceAccountName": "trainer",
    "imagePullSecrets": [{"name": "regcred"}],
    "volumes": [
        {"name": "dispatch-volume-0", "hostPath": {"path": "/datasets", "type": "Directory"}},
        {"name": "dispatch-volume-1",
         "persistentVolumeClaim": {"claimName": "checkpoints", "readOnly": False}},
    ],
}
MOUNTS = [{"name": "dispatch-volume-0", "mountPath": "/data", "readOnly": True},
          {"name": "dispatch-volume-1", "mountPath": "/ckpt", "readOnly": False}]


def dispatch(tmp: Path, *args: str, spec: dict[str, Any] = SPEC,
             **env: str) -> subprocess.CompletedProcess[str]:
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    full = {k: v for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "DISPATCH_KUBECONFIG", "DISPATCH_K8S_CONTEXT",
                         "KUBERNETES_SERVICE_HOST")}
    full.update({"DISPATCH_STORE": str(tmp / "record.sqlite3"), "HOME": str(tmp / "home"),
                 "XDG_STATE_HOME": str(tmp / "state"), **env})
    return subprocess.run([sys.executable, "-m", "dispatch.cli", *args, str(path)],
                          env=full, cwd=tmp, text=True, capture_output=True, timeout=120)


def pod_patch(trainjob: dict[str, Any]) -> dict[str, Any]:
    (patch,) = trainjob["spec"]["runtimePatches"]
    (job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert job["name"] == "node"
    spec: dict[str, Any] = job["template"]["spec"]["template"]["spec"]
    return spec


def test_dry_run_shows_the_pod_keys_in_the_contexts_namespace(fake: FakeApiServer,
                                                              tmp_path: Path) -> None:
    config = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace="team-a")
    done = dispatch(tmp_path, "submit", "--dry-run", DISPATCH_KUBECONFIG=str(config))
    assert done.returncode == 0, done.stderr
    (trainjob,) = [d for d in yaml.safe_load_all(done.stdout) if d and d.get("kind") == "TrainJob"]
    assert trainjob["metadata"]["namespace"] == "team-a"  # where the real submit goes
    assert pod_patch(trainjob) == {**POD, "containers": [{"name": "node",
                                                          "volumeMounts": MOUNTS}]}
    assert trainjob["spec"]["trainer"]["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 8}}
    assert fake.all("TrainJob") == []  # a dry run sends nothing


def test_dry_run_without_any_configuration_says_its_namespace_stands_in(tmp_path: Path
                                                                      ) -> None:
    """A dry run sends nothing and needs no cluster: with no kubeconfig at all it still shows
    the TrainJob, and says that 'default' stands in for the context's namespace (it is no
    exit 2 as a submit is; a broken kubeconfig still is)."""
    done = dispatch(tmp_path, "submit", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "no Kubernetes configuration here: its namespace 'default' stands in" in done.stdout
    (trainjob,) = [d for d in yaml.safe_load_all(done.stdout) if d and d.get("kind") == "TrainJob"]
    assert trainjob["metadata"]["namespace"] == "default"
    broken = tmp_path / "broken.kubeconfig"
    broken.write_text("clusters: 5\n")
    broken.chmod(0o600)
    done = dispatch(tmp_path, "submit", "--dry-run", DISPATCH_KUBECONFIG=str(broken))
    assert done.returncode == 2 and str(broken) in done.stderr, done.stderr


def test_a_real_submit_carries_the_pod_keys_to_the_pods(fake: FakeApiServer,
                                                        tmp_path: Path) -> None:
    config = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace="team-a")
    done = dispatch(tmp_path, "submit", DISPATCH_KUBECONFIG=str(config))
    assert done.returncode == 0, done.stderr
    (trainjob,) = fake.all("TrainJob")  # created, so it passed Trainer's CRD schema
    assert trainjob["metadata"]["namespace"] == "team-a"
    assert pod_patch(trainjob)["nodeSelector"] == {"gpu": "h100"}
    name = trainjob["metadata"]["name"]
    pods = tr.materialize(fake, "team-a", name, ["gpu-1", "gpu-2"])
    (jobset,) = fake.all("JobSet")  # stored, so it passed JobSet's CRD schema
    template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    made = [fake.get("Pod", "team-a", p) for p in pods]
    for spec in [template, *((pod or {}).get("spec", {}) for pod in made)]:
        for key, value in POD.items():
            assert spec[key] == value, key
        (container,) = spec["containers"]
        assert container["volumeMounts"] == MOUNTS


def test_bad_pod_keys_are_refused_before_anything_is_recorded(fake: FakeApiServer,
                                                              tmp_path: Path) -> None:
    config = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace="team-a")
    bad = {**SPEC, "kubeflow": {**SPEC["kubeflow"],
                                "tolerations": [{"key": "k", "operator": "In"}],
                                "volumes": [{"host_path": "data", "mount_path": "/data"}],
                                "priority_class": "high"}}
    for args in (("submit", "--dry-run"), ("submit",)):
        done = dispatch(tmp_path, *args, spec=bad, DISPATCH_KUBECONFIG=str(config))
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        for where in ("kubeflow.tolerations[0].operator", "kubeflow.volumes[0].host_path",
                      "kubeflow.priority_class"):
            assert where in done.stderr, done.stderr
    assert fake.all("TrainJob") == []
    listed = dispatch(tmp_path, "ls", spec=bad, DISPATCH_KUBECONFIG=str(config))
    assert "pods-on-real-nodes" not in listed.stdout
