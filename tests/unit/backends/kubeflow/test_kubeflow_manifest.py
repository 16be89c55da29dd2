"""The spec -> TrainJob translation: strict kubeflow: section, labels, names, and the YAML that
dry_run prints, which must validate against the real TrainJob CRD schema."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.specs import parse_spec  # noqa: E402

from dispatch.backends.base import Submission  # noqa: E402
from dispatch.backends.kubeflow import KubeflowBackend, KubeflowSpecError  # noqa: E402
from dispatch.backends.kubeflow.manifest import (  # noqa: E402
    NAME_MAX,
    build_trainjob,
    object_name,
    parse_section,
)
from dispatch.core.policy import Action  # noqa: E402
from kube_fake import schemas  # noqa: E402


def submission(
    kubeflow: dict[str, Any], token: str = "job-1.0", gated: bool = False, **extra: Any
) -> Submission:
    data = {
        "name": "Train GPT",
        "command": ["python", "train.py", "--lr", "3e-4"],
        "backend": "kubeflow",
        "nodes": 4,
        "kubeflow": kubeflow,
        **extra,
    }
    return Submission(job_id="job-1", number=0, token=token, spec=parse_spec(data), gated=gated)


FULL = {
    "namespace": "team-a",
    "runtime": {"name": "torch-distributed", "kind": "TrainingRuntime"},
    "image": "ghcr.io/me/train:1.2",
    "numProcPerNode": 8,
    "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8, "cpu": "32"}},
    "labels": {"team": "a"},
}


def test_full_spec_makes_a_valid_trainjob() -> None:
    sub = submission(FULL, gated=True, memory="64G", time_limit="2h", env={"B": "2", "A": "1"})
    obj = build_trainjob(sub, "default")
    schemas.validate("TrainJob", obj)
    spec = obj["spec"]
    assert obj["metadata"]["namespace"] == "team-a"
    assert obj["metadata"]["labels"]["dispatch.io/token"] == "job-1.0"
    assert obj["metadata"]["labels"]["dispatch.io/managed"] == "true"
    assert obj["metadata"]["labels"]["team"] == "a"
    assert spec["suspend"] is True
    assert spec["runtimeRef"] == {
        "name": "torch-distributed",
        "kind": "TrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    assert spec["trainer"]["command"] == ["python", "train.py", "--lr", "3e-4"]
    assert spec["trainer"]["numNodes"] == 4
    assert spec["trainer"]["numProcPerNode"] == 8
    assert spec["trainer"]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"},
                                      {"name": "DISPATCH_JOB_ID", "value": "job-1"},
                                      {"name": "DISPATCH_SUBMISSION", "value": "0"}]
    assert spec["trainer"]["resourcesPerNode"]["limits"] == {
        "nvidia.com/gpu": 8,
        "cpu": "32",
        "memory": "64Gi",
    }
    assert spec["trainer"]["resourcesPerNode"]["requests"] == {"memory": "64Gi"}
    assert spec["activeDeadlineSeconds"] == 7200


def test_minimal_spec_uses_the_default_namespace_and_runtime_kind() -> None:
    obj = build_trainjob(submission({"runtime": "torch"}), "ns-from-kubeconfig")
    schemas.validate("TrainJob", obj)
    assert obj["metadata"]["namespace"] == "ns-from-kubeconfig"
    assert obj["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    assert obj["spec"]["suspend"] is False
    assert "activeDeadlineSeconds" not in obj["spec"]


def test_dry_run_prints_the_yaml_without_a_cluster() -> None:
    backend = KubeflowBackend(kubeconfig="/nonexistent/kubeconfig")
    dry = backend.dry_run(submission(FULL))
    assert dry.argv == () and [title for title, _ in dry.documents] == ["TrainJob"]
    obj = yaml.safe_load(dry.documents[0][1])
    schemas.validate("TrainJob", obj)
    assert obj["kind"] == "TrainJob" and obj["apiVersion"] == "trainer.kubeflow.org/v1alpha1"


@pytest.mark.parametrize(
    ("section", "where"),
    [
        ({}, ""),
        ({"image": "x"}, "runtime"),
        ({"runtime": "t", "bogus": 1}, "bogus"),
        ({"runtime": {"name": "t", "kind": "Pod"}}, "runtime.kind"),
        ({"runtime": {"name": "t", "extra": 1}}, "runtime.extra"),
        ({"runtime": "t", "namespace": "Not_A_NS"}, "namespace"),
        ({"runtime": "t", "numProcPerNode": 0}, "numProcPerNode"),
        ({"runtime": "t", "numProcPerNode": "auto"}, "numProcPerNode"),
        (
            {"runtime": "t", "resourcesPerNode": {"limits": {"cpu": "lots"}}},
            "resourcesPerNode.limits.cpu",
        ),
        ({"runtime": "t", "resourcesPerNode": {"limit": {}}}, "resourcesPerNode.limit"),
        ({"runtime": "t", "labels": {"team": "a b"}}, "labels.team"),
        ({"runtime": "t", "labels": {"dispatch.io/token": "x"}}, "labels.dispatch.io/token"),
        ({"runtime": "t", "labels": {"bad key!": "x"}}, "labels.bad key!"),
    ],
)
def test_bad_section_names_its_key(section: dict[str, Any], where: str) -> None:
    with pytest.raises(KubeflowSpecError) as err:
        parse_section(section)
    assert err.value.where == where
    assert str(err.value).startswith("kubeflow")


@pytest.mark.parametrize("token", ["x" * 62 + ".0", "job one.0", "-job.0", "job.0_"[:-2] + "é.0"])
def test_token_that_cannot_be_a_label_is_refused(token: str) -> None:
    with pytest.raises(KubeflowSpecError) as err:
        build_trainjob(submission({"runtime": "t"}, token=token), "default")
    assert err.value.where == "(token)"


@settings(max_examples=100, deadline=None)
@given(
    name=st.text(min_size=1, max_size=80).filter(lambda s: s.strip()),
    token=st.from_regex(r"[a-z0-9][a-z0-9.-]{0,40}\.[0-9]{1,4}", fullmatch=True),
)
def test_object_name_is_a_dns_label_and_stable(name: str, token: str) -> None:
    got = object_name(name, token)
    assert got == object_name(name, token)
    assert len(got) <= NAME_MAX
    assert (
        schemas.problems(
            "TrainJob",
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": got},
                "spec": {"runtimeRef": {"name": "t"}},
            },
        )
        == []
    )
    assert got[0].isalpha()


def test_different_tokens_make_different_names() -> None:
    assert object_name("train", "job-1.0") != object_name("train", "job-1.1")


def test_declarations() -> None:
    plain = KubeflowBackend(kubeconfig="/nonexistent").declarations()
    assert plain.backend == "kubeflow"
    assert plain.node_loss_window == timedelta(minutes=5)
    assert plain.native_actions == frozenset()
    restarting = KubeflowBackend(
        kubeconfig="/nonexistent", restart_native=True, node_loss_window=timedelta(minutes=9)
    ).declarations()
    assert restarting.native_actions == frozenset({Action.RESTART})
    assert Action.REQUEUE not in restarting.native_actions
    assert restarting.node_loss_window == timedelta(minutes=9)


# Issue 45 item 6: each Kubernetes name, label, quantity and image check takes whole values
# only. With ``re.match(r"^...$")`` a value ending in "\n" passed ("$" matches before a final
# newline) and `submit --dry-run` exited 0. (the section made from a value, a good value,
# where the error is named)
NEWLINE_CASES: dict[str, tuple[Callable[[str], dict[str, Any]], str, str]] = {
    "namespace": (lambda v: {"runtime": "t", "namespace": v}, "team-a", "namespace"),
    "label value": (lambda v: {"runtime": "t", "labels": {"team": v}}, "a", "labels.team"),
    "label name": (lambda v: {"runtime": "t", "labels": {v: "a"}}, "team", "labels.team\n"),
    "label prefix": (lambda v: {"runtime": "t", "labels": {v + "/team": "a"}}, "example.com",
                     "labels.example.com\n/team"),
    "annotation name": (lambda v: {"runtime": "t", "annotations": {v: "a"}}, "note",
                        "annotations.note\n"),
    "annotation prefix": (lambda v: {"runtime": "t", "annotations": {v + "/note": "a"}},
                          "example.com", "annotations.example.com\n/note"),
    "quantity": (lambda v: {"runtime": "t", "resourcesPerNode": {"limits": {"cpu": v}}}, "8",
                 "resourcesPerNode.limits.cpu"),
    "runtime": (lambda v: {"runtime": v}, "torch-distributed", "runtime"),
    "runtime ref": (lambda v: {"runtime": {"name": v}}, "torch-distributed", "runtime"),
    "image": (lambda v: {"runtime": "t", "image": v}, "ghcr.io/x/train:1", "image"),
}


@pytest.mark.parametrize("case", NEWLINE_CASES, ids=list(NEWLINE_CASES))
def test_a_value_ending_in_a_newline_is_refused(case: str) -> None:
    make, good, where = NEWLINE_CASES[case]
    parse_section(make(good))  # the value itself is fine
    with pytest.raises(KubeflowSpecError) as err:
        parse_section(make(good + "\n"))
    assert err.value.where == where


def test_a_token_ending_in_a_newline_cannot_be_a_label() -> None:
    build_trainjob(submission({"runtime": "t"}, token="job-1.0"), "default")
    with pytest.raises(KubeflowSpecError) as err:
        build_trainjob(submission({"runtime": "t"}, token="job-1.0\n"), "default")
    assert err.value.where == "(token)"


@pytest.mark.parametrize("runtime", ["Torch", "torch distributed", "-torch", "torch_1", ""])
def test_a_runtime_name_is_a_dns_subdomain(runtime: str) -> None:
    with pytest.raises(KubeflowSpecError) as err:
        parse_section({"runtime": runtime})
    assert err.value.where == "runtime"


# Issues 46 and 47 item 5: what a pod on a real cluster needs, carried by the TrainJob's
# runtimePatches (Trainer v2.3.0's PodSpecPatch) and checked before anything is recorded.
POD_KEYS: dict[str, Any] = {
    "runtime": "torch-distributed",
    "resourcesPerNode": {"requests": {"nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": "8"}},
    "node_selector": {"gpu": "h100", "topology.kubernetes.io/zone": "zone-a"},
    "tolerations": [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "value": "true", "effect": "NoExecute", "tolerationSeconds": 30},
        {"operator": "Exists"},
    ],
    "volumes": [
        {"host_path": "/datasets", "mount_path": "/data", "read_only": True},
        {"pvc": "checkpoints", "mount_path": "/ckpt"},
    ],
    "service_account": "trainer",
    "image_pull_secrets": ["regcred", "mirror.pull"],
}


def _pod_patch(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod patch where the CRD puts it: runtimePatches[manager].trainingRuntimeSpec
    .template.spec.replicatedJobs[name=node].template.spec.template.spec."""
    (patch,) = [p for p in obj["spec"]["runtimePatches"]
                if p["manager"] == "dispatch.io/kubeflow-backend"]
    jobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    (node,) = [j for j in jobs if j["name"] == "node"]
    spec: dict[str, Any] = node["template"]["spec"]["template"]["spec"]
    return spec


def test_pod_keys_land_in_the_runtime_patch_the_crd_defines() -> None:
    obj = build_trainjob(submission(POD_KEYS), "default")
    schemas.validate("TrainJob", obj)  # the real CRD, unknown fields refused
    pod = _pod_patch(obj)
    assert pod["nodeSelector"] == {"gpu": "h100", "topology.kubernetes.io/zone": "zone-a"}
    assert pod["tolerations"] == [
        {"operator": "Exists", "key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"operator": "Equal", "key": "spot", "value": "true", "effect": "NoExecute",
         "tolerationSeconds": 30},
        {"operator": "Exists"},
    ]
    assert pod["serviceAccountName"] == "trainer"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror.pull"}]
    assert pod["volumes"] == [
        {"name": "dispatch-volume-0", "hostPath": {"path": "/datasets", "type": "Directory"}},
        {"name": "dispatch-volume-1",
         "persistentVolumeClaim": {"claimName": "checkpoints", "readOnly": False}},
    ]
    assert pod["containers"] == [{"name": "node", "volumeMounts": [
        {"name": "dispatch-volume-0", "mountPath": "/data", "readOnly": True},
        {"name": "dispatch-volume-1", "mountPath": "/ckpt", "readOnly": False},
    ]}]
    assert obj["spec"]["trainer"]["resourcesPerNode"] == {
        "requests": {"nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": "8"}}
    # The JobSet label patch is still there beside the pod patch.
    meta = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["metadata"]
    assert meta["labels"]["dispatch.io/token"] == "job-1.0"


def test_no_pod_keys_no_pod_patch() -> None:
    obj = build_trainjob(submission({"runtime": "t"}), "default")
    assert "spec" not in obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]


def test_dry_run_shows_the_pod_keys() -> None:
    dry = KubeflowBackend(kubeconfig="/nonexistent").dry_run(
        submission({**POD_KEYS, "namespace": "team-a"}))
    obj = yaml.safe_load(dry.documents[0][1])
    schemas.validate("TrainJob", obj)
    assert _pod_patch(obj) == _pod_patch(build_trainjob(submission(POD_KEYS), "x"))


def _with(**keys: Any) -> dict[str, Any]:
    return {"runtime": "t", **keys}


def _vol(**keys: Any) -> dict[str, Any]:
    return {"mount_path": "/m", "host_path": "/h", **keys}


BAD_POD_KEYS: list[tuple[dict[str, Any], str]] = [
    (_with(node_selector=["gpu"]), "node_selector"),
    (_with(node_selector={"gpu": 1}), "node_selector.gpu"),
    (_with(node_selector={"gpu": "h 100"}), "node_selector.gpu"),
    (_with(node_selector={"bad key!": "x"}), "node_selector.bad key!"),
    (_with(node_selector={"gpu": "h100\n"}), "node_selector.gpu"),
    (_with(volumes={"mount_path": "/m"}), "volumes"),
    (_with(volumes=[{"host_path": "/h"}]), "volumes[0].mount_path"),
    (_with(volumes=[_vol(size=1)]), "volumes[0].size"),
    (_with(volumes=[_vol(read_only="yes")]), "volumes[0].read_only"),
    (_with(volumes=[{"mount_path": "/m"}]), "volumes[0]"),
    (_with(volumes=[_vol(pvc="data")]), "volumes[0]"),
    (_with(volumes=[_vol(host_path="data")]), "volumes[0].host_path"),
    (_with(volumes=[_vol(host_path="/a/../etc")]), "volumes[0].host_path"),
    (_with(volumes=[_vol(mount_path="data")]), "volumes[0].mount_path"),
    (_with(volumes=[_vol(mount_path="/a:b")]), "volumes[0].mount_path"),
    (_with(volumes=[_vol(), _vol(mount_path="/m/")]), "volumes[1].mount_path"),
    (_with(volumes=[{"mount_path": "/m", "pvc": "Data_Set"}]), "volumes[0].pvc"),
    (_with(priority_class="high"), "priority_class"),
    (_with(priority_class="High!"), "priority_class"),
    (_with(tolerations=[{"key": "k", "operator": "In"}]), "tolerations[0].operator"),
    (_with(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
     "tolerations[0].value"),
    (_with(tolerations=[{"value": "v"}]), "tolerations[0].operator"),
    (_with(tolerations=[{"key": "k", "effect": "NoRun"}]), "tolerations[0].effect"),
    (_with(tolerations=[{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]),
     "tolerations[0].tolerationSeconds"),
    (_with(tolerations=[{"key": "k", "tolerationSeconds": "5"}]),
     "tolerations[0].tolerationSeconds"),
    (_with(tolerations=[{"key": "bad key!", "operator": "Exists"}]), "tolerations[0].key"),
    (_with(tolerations=[{"key": "k", "value": "a b"}]), "tolerations[0].value"),
    (_with(tolerations=[{"key": "k", "Operator": "Exists"}]), "tolerations[0].Operator"),
    (_with(service_account="Trainer"), "service_account"),
    (_with(service_account=["trainer"]), "service_account"),
    (_with(image_pull_secrets="regcred"), "image_pull_secrets"),
    (_with(image_pull_secrets=["reg_cred"]), "image_pull_secrets[0]"),
    (_with(image_pull_secrets=["a", "a"]), "image_pull_secrets[1]"),
    (_with(image_pull_secrets=[{"name": "a"}]), "image_pull_secrets[0]"),
    (_with(resourcesPerNode={"limits": {"nvidia.com/gpu": 0}}),
     "resourcesPerNode.limits.nvidia.com/gpu"),
    (_with(resourcesPerNode={"limits": {"nvidia.com/gpu": "0.5"}}),
     "resourcesPerNode.limits.nvidia.com/gpu"),
    (_with(resourcesPerNode={"limits": {"nvidia.com/gpu": "1k"}}),
     "resourcesPerNode.limits.nvidia.com/gpu"),
    (_with(resourcesPerNode={"requests": {"nvidia.com/gpu": 2}}),
     "resourcesPerNode.limits.nvidia.com/gpu"),
    (_with(resourcesPerNode={"requests": {"nvidia.com/gpu": 2},
                             "limits": {"nvidia.com/gpu": 4}}),
     "resourcesPerNode.requests.nvidia.com/gpu"),
]


@pytest.mark.parametrize(("section", "where"), BAD_POD_KEYS)
def test_bad_pod_key_names_its_path(section: dict[str, Any], where: str) -> None:
    with pytest.raises(KubeflowSpecError) as err:
        parse_section(section)
    assert err.value.where == where, err.value
    assert str(err.value).startswith(f"kubeflow.{where}: "), err.value


def test_every_problem_of_the_section_at_once() -> None:
    section = _with(
        bogus=1,
        node_selector={"gpu": "h 100"},
        volumes=[{"host_path": "data", "mount_path": "/m"}, {"mount_path": "/m", "junk": 1},
                 {"pvc": "ckpt", "mount_path": "/m"}],
        tolerations=[{"key": "k", "operator": "In", "effect": "NoRun"}],
        service_account="Trainer",
        image_pull_secrets=["a", "a"],
        resourcesPerNode={"limits": {"nvidia.com/gpu": 0}},
    )
    with pytest.raises(KubeflowSpecError) as err:
        parse_section(section)
    assert sorted(w for w, _ in err.value.problems) == sorted([
        "bogus", "node_selector.gpu", "volumes[0].host_path", "volumes[1].junk",
        "volumes[2].mount_path", "tolerations[0].operator", "tolerations[0].effect",
        "service_account", "image_pull_secrets[1]", "resourcesPerNode.limits.nvidia.com/gpu",
    ])
    text = str(err.value)
    assert text.startswith("10 problems:\n") and "kubeflow.volumes[2].mount_path: /m is " in text


@pytest.mark.parametrize("good", [
    _with(tolerations=[{"key": "k", "value": "v", "effect": "NoExecute",
                        "tolerationSeconds": 0}]),
    _with(tolerations=[{"key": "example.com/k", "operator": "Exists"}]),
    _with(volumes=[{"pvc": "a.b-c", "mount_path": "/"}, {"host_path": "/", "mount_path": "/x"}]),
    _with(resourcesPerNode={"limits": {"nvidia.com/gpu": "8"}}),
    _with(resourcesPerNode={"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": 2}}),
    _with(node_selector={}, tolerations=[], volumes=[], image_pull_secrets=[]),
])
def test_good_pod_keys_make_a_valid_trainjob(good: dict[str, Any]) -> None:
    schemas.validate("TrainJob", build_trainjob(submission(good), "default"))


# ---- kubeflow.shared_dir: the pods' progress and error files (issue 46) ----------------------

SHARED = _with(volumes=[{"host_path": "/srv/shared", "mount_path": "/shared"},
                        {"pvc": "data", "mount_path": "/data", "read_only": True}],
               shared_dir="/shared/runs")


def test_shared_dir_names_each_pods_progress_and_error_file_after_the_pod() -> None:
    obj = build_trainjob(submission(SHARED, env={"A": "1", "DISPATCH_PROGRESS_FILE": "/x"}),
                         "default")
    schemas.validate("TrainJob", obj)  # valueFrom is the CRD's own EnvVar
    env = obj["spec"]["trainer"]["env"]
    # the pod's name first: Kubernetes expands $(NAME) only from an earlier variable
    assert env[0] == {"name": "DISPATCH_POD_NAME",
                      "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    values = {e["name"]: e.get("value") for e in env}
    assert values["DISPATCH_PROGRESS_FILE"] == \
        "/shared/runs/dispatch-$(DISPATCH_POD_NAME).progress.jsonl"  # dispatch's wins
    assert values["TORCHELASTIC_ERROR_FILE"] == \
        "/shared/runs/dispatch-$(DISPATCH_POD_NAME).error.json"
    assert values["A"] == "1" and values["DISPATCH_JOB_ID"] == "job-1"
    names = [e["name"] for e in env]
    assert len(names) == len(set(names))
    assert names.index("DISPATCH_POD_NAME") < names.index("DISPATCH_PROGRESS_FILE")
    assert obj["metadata"]["annotations"]["dispatch.io/shared-dir"] == "/shared/runs"


def test_no_shared_dir_no_file_variables() -> None:
    obj = build_trainjob(submission(_with(volumes=[{"host_path": "/s", "mount_path": "/s"}])),
                         "default")
    names = {e["name"] for e in obj["spec"]["trainer"]["env"]}
    assert not names & {"DISPATCH_POD_NAME", "DISPATCH_PROGRESS_FILE", "TORCHELASTIC_ERROR_FILE"}
    assert "dispatch.io/shared-dir" not in obj["metadata"]["annotations"]


def test_dry_run_shows_the_shared_dir_files() -> None:
    dry = KubeflowBackend(kubeconfig="/nonexistent").dry_run(
        submission({**SHARED, "namespace": "team-a"}))
    text = dry.documents[0][1]
    assert "/shared/runs/dispatch-$(DISPATCH_POD_NAME).progress.jsonl" in text
    assert "dispatch.io/shared-dir: /shared/runs" in text


@pytest.mark.parametrize(("section", "why"), [
    (_with(shared_dir="/shared"), "under no volume's mount_path (volumes mounted: none)"),
    (_with(volumes=[_vol(mount_path="/shared")], shared_dir="/sharedx"),
     "under no volume's mount_path (volumes mounted: /shared)"),
    (_with(volumes=[_vol(mount_path="/data", read_only=True)], shared_dir="/data/x"),
     "on a read-only volume"),
    (_with(volumes=[_vol(mount_path="/s")], shared_dir="s"), "not an absolute path"),
    (_with(volumes=[_vol(mount_path="/s")], shared_dir="/s/../etc"), "holds '..'"),
    (_with(volumes=[_vol(mount_path="/s")], shared_dir="/s/$(HOME)"), "holds '$'"),
    (_with(volumes=[_vol(mount_path="/s")], shared_dir="/s/\n"), "a newline"),
    (_with(volumes=[_vol(mount_path="/s")], shared_dir=["/s"]), "Expected `str | null`"),
])
def test_a_shared_dir_that_is_no_writable_volume_is_refused(section: dict[str, Any],
                                                            why: str) -> None:
    with pytest.raises(KubeflowSpecError) as err:
        parse_section(section)
    assert err.value.where == "shared_dir", err.value
    assert why in str(err.value), err.value


@pytest.mark.parametrize("shared", ["/s", "/s/", "/s/runs/a"])
def test_a_shared_dir_at_or_under_a_writable_mount_is_taken(shared: str) -> None:
    section = _with(volumes=[_vol(mount_path="/s")], shared_dir=shared)
    assert parse_section(section).shared_dir == shared
    schemas.validate("TrainJob", build_trainjob(submission(section), "default"))
