"""The informer keeps of each object only the fields dispatch reads (issue 49): what the cache
holds after the LIST and after every watch event of a recording, and that the check every
reader's unit test runs (projected.py, through conftest.py) does catch a dropped field.

That nothing read is dropped is checked by the readers' own tests (each call also reads its
objects projected) and by test_kubeflow_replay.py, whose every recorded look is read the same
through the informer (projected) and through lists (whole)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from projected import checked
from test_kubeflow_replay import Replayed, recorded, scenarios

from dispatch.backends.kubeflow import KubeflowBackend
from dispatch.backends.kubeflow import projection as proj
from dispatch.backends.kubeflow.mapping import report_trainjob
from dispatch.backends.kubeflow.projection import LABELS, SHAPES, project


def cached(scenario: str) -> dict[str, list[dict[str, Any]]]:
    """Every object the informer's cache held, by kind, over a replay of the recording: its
    LISTed state listed, then each event arriving on its watch (the cache read after each)."""
    lines = recorded(scenario)
    api = Replayed()
    for line in [ln for ln in lines if ln["type"] == "LISTED"]:
        api.apply(line)
    ns = next(ln["object"]["metadata"]["namespace"] for ln in lines if ln["kind"] == "TrainJob")
    backend = KubeflowBackend(client=api, namespaces=[ns])  # type: ignore[arg-type]
    out: dict[str, list[dict[str, Any]]] = {}

    def take() -> None:
        informer = backend.informer
        assert informer is not None
        with informer.cond:
            for r in informer._reflectors.values():
                out.setdefault(r.kind, []).extend(json.loads(json.dumps(list(r.items.values()))))

    try:
        assert backend.discover([], []).complete
        take()
        for line in [ln for ln in lines if ln["type"] != "LISTED"]:
            api.apply(line)
            api.deliver(line)
            take()
        return out
    finally:
        backend.close()


@pytest.mark.parametrize("scenario", scenarios())
def test_the_cache_holds_only_the_fields_read(scenario: str) -> None:
    held = cached(scenario)
    assert {"TrainJob", "JobSet", "Job", "Pod", "Node"} <= {k for k, v in held.items() if v}
    for kind, objects in held.items():
        for obj in objects:
            assert obj == project(kind, obj), (kind, obj)  # nothing beyond the shape
    for pod in held["Pod"]:
        # no containers, volumes, tolerations: its node and restartPolicy (a crash loop)
        assert set(pod["spec"]) <= {"nodeName", "restartPolicy"}
        assert set(pod["metadata"].get("labels", {})) <= set(LABELS.names)
        assert "managedFields" not in pod["metadata"]
    for job in held["Job"]:
        assert "spec" not in job  # its pod template
    for js in held["JobSet"]:
        assert "spec" not in js  # its replicatedJobs


def test_the_cache_is_a_fraction_of_the_objects() -> None:
    # the recording's objects as the API server sent them (managedFields already dropped)
    whole = [ln["object"] for ln in recorded("exit3") if ln["type"] != "LISTED"]
    kinds = [ln["kind"] for ln in recorded("exit3") if ln["type"] != "LISTED"]
    sent = sum(len(json.dumps(o)) for o in whole)
    kept = sum(len(json.dumps(project(k, o))) for k, o in zip(kinds, whole, strict=True))
    assert kept * 3 < sent, (kept, sent)


def test_the_readers_check_catches_a_dropped_field(monkeypatch: pytest.MonkeyPatch) -> None:
    # A projection that forgot the containers' statuses: the OOM is no longer read.
    pod_status = dict(SHAPES["Pod"]["status"])  # type: ignore[arg-type]
    del pod_status["containerStatuses"]
    monkeypatch.setitem(SHAPES, "Pod", {**SHAPES["Pod"], "status": pod_status})
    held = recorded("oom")
    last: dict[str, dict[str, Any]] = {}
    for line in held:
        last[line["kind"]] = line["object"]
    read = checked("report_trainjob", report_trainjob)
    with pytest.raises(AssertionError, match="reads the projected objects otherwise"):
        read(last["TrainJob"], last["JobSet"], [last["Job"]], [last["Pod"]], [last["Node"]],
             datetime.now(UTC))


def test_a_value_of_the_wrong_type_is_kept_as_it_is() -> None:
    odd = {"metadata": ["not", "a", "map"], "status": {"conditions": "none", "phase": 3}}
    assert project("Pod", odd) == odd
    assert project("Widget", {"a": 1}) == {"a": 1}  # a kind nothing here knows: whole
    assert proj.SHORT > 0
