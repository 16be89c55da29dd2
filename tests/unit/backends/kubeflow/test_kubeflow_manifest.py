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

from dispatch.backends.base import Submission  # noqa: E402
from dispatch.backends.kubeflow import KubeflowBackend, KubeflowSpecError  # noqa: E402
from dispatch.backends.kubeflow.manifest import (  # noqa: E402
    NAME_MAX,
    build_trainjob,
    object_name,
    parse_section,
)
from dispatch.core.policy import Action  # noqa: E402
from dispatch.core.spec import parse_spec  # noqa: E402
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
