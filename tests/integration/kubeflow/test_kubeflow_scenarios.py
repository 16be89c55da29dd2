"""The issue's scenarios, staged on the stand-in API server: the test plays Trainer, JobSet, the
Job controller and the kubelet; the backend sees them only through the REST API."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubeflow_support import Clock, make_backend
from tests.specs import parse_spec

from dispatch.backends.base import Submission, SubmitRejected
from dispatch.backends.kubeflow import KubeflowBackend, ObjectGone
from dispatch.core.model import CauseKind, ObjectReport, Provenance, SchedulerUnreachable, State
from kube_fake import FakeApiServer
from kube_fake import trainer as tr

NODES = ["n1", "n2"]


def submit(
    backend: KubeflowBackend, job: str = "job-a", gated: bool = False
) -> tuple[str, str, str]:
    spec = parse_spec(
        {
            "name": f"train {job}",
            "command": ["torchrun", "train.py"],
            "backend": "kubeflow",
            "nodes": len(NODES),
            "kubeflow": {"runtime": "torch-distributed", "image": "trainer:1"},
        }
    )
    token = f"{job}.0"
    ref = backend.submit(Submission(job_id=job, number=0, token=token, spec=spec, gated=gated))
    namespace, name = ref.split("/")
    return token, namespace, name


def look(backend: KubeflowBackend, token: str) -> ObjectReport:
    found = backend.discover([token], [])
    assert found.complete
    (report,) = found.objects
    return report


@pytest.fixture
def running(fake: FakeApiServer, backend: KubeflowBackend) -> tuple[str, str, str, list[str]]:
    for n in NODES:
        fake.put(tr.node(n))
    token, ns, name = submit(backend)
    pods = tr.materialize(fake, ns, name, NODES)
    assert look(backend, token).state is State.RUNNING
    return token, ns, name, pods


def fail(fake: FakeApiServer, ns: str, name: str) -> None:
    failed = tr.cond(
        "Failed", reason="FailedJobs", message=f"jobset failed: job {name}-node-0", at=tr.T2
    )
    tr.set_conditions(fake, "JobSet", ns, name, failed)
    tr.set_conditions(fake, "TrainJob", ns, name, failed)
    tr.finish_jobs_status(fake, ns, name, succeeded=0, failed=1)


def test_the_failing_pods_termination_message_is_the_applications_error(  # type: ignore[no-untyped-def]
        fake: FakeApiServer, backend: KubeflowBackend, running) -> None:
    """Issue 23: the first failing container's terminated.message (node 1 fails first)
    becomes the application's error, apart from the cause."""
    token, ns, name, pods = running
    tr.terminate(fake, ns, pods[1], reason="Error", exit_code=1, at=tr.T1, message=(
        "Traceback (most recent call last):\n  File \"/w/train.py\", line 9, in main\n"
        "FloatingPointError: loss is NaN at step 7\n"))
    tr.terminate(fake, ns, pods[0], reason="Error", exit_code=143, at=tr.T2,
                 message="torch.distributed.elastic.multiprocessing.api.SignalException: "
                         "Process 7 got signal: 15")
    fail(fake, ns, name)
    report = look(backend, token)
    assert report.state is State.FAILED and report.cause.kind is CauseKind.NON_ZERO_EXIT
    error = report.executions[-1].error
    assert error is not None
    assert error.source.value == "termination-message"
    assert (error.rank, error.node, error.exit_code) == (1, "n2", 1)
    assert error.message == "FloatingPointError: loss is NaN at step 7"
    assert 'File "/w/train.py", line 9' in error.traceback_tail


def _stuck_on_a_lost_node(fake: FakeApiServer, ns: str, pods: list[str]) -> None:
    """n2 is lost and one pod stays Terminating there: a foreground delete of the TrainJob
    keeps it (with a deletionTimestamp) until that node is released."""
    fake.put(tr.node("n2", lost=True, since="2026-03-01T10:05:00Z"))
    fake.unreachable.add("n2")
    fake.update("Pod", ns, pods[1], {"metadata": {"deletionTimestamp": "2026-03-01T10:06:00Z"}})


def test_our_stop_is_annotated_and_read_back_as_ours(
    fake: FakeApiServer, backend: KubeflowBackend, running,  # type: ignore[no-untyped-def]
    tmp_path: Path, clock: Clock,
) -> None:
    token, ns, name, pods = running
    _stuck_on_a_lost_node(fake, ns, pods)
    stopped = [r for r in fake.requests if r.method == "PATCH" and name in r.path]
    backend.stop(f"{ns}/{name}")
    # The stop mark went on before the delete (a person deleting it meanwhile would have been
    # seen without it); the delete is background (Trainer re-creates the JobSet of a TrainJob
    # under foreground deletion), so the TrainJob, mark and all, is gone at once.
    marks = [r for r in fake.requests if r.method == "PATCH" and name in r.path]
    assert len(marks) == len(stopped) + 1
    assert fake.get("TrainJob", ns, name) is None
    # Another process (a supervisor started after ours stopped) knows the ref from the record:
    # the object is alive while its stuck pod remains, then cancelled with no actor, which the
    # core reads as the effect of the recorded stop (decide._own_stop).
    (tmp_path / "other").mkdir()
    other = make_backend(fake, tmp_path / "other", clock, informer=False)
    try:
        (deleting,) = other.discover([token], [f"{ns}/{name}"]).objects
        assert deleting.alive  # a pod of it remains: not ended
        fake.release_node("n2")
        (ended,) = other.discover([token], [f"{ns}/{name}"]).objects
    finally:
        other.close()
    assert ended.state is State.CANCELLED and ended.cause.actor is None


def test_a_persons_delete_during_our_stop_stays_theirs(
    fake: FakeApiServer, backend: KubeflowBackend, running  # type: ignore[no-untyped-def]
) -> None:
    """S14, issue 21 item 15: someone deletes the TrainJob (foreground) while dispatch is about
    to stop it; dispatch's stop then finds it deleting without its annotation, leaves it
    unmarked, and the end is a cancel whose actor is not dispatch (a person's, final)."""
    token, ns, name, pods = running
    _stuck_on_a_lost_node(fake, ns, pods)
    fake.remove("TrainJob", ns, name, policy="Foreground")
    assert look(backend, token).alive  # deleting, held by the stuck pod
    backend.stop(f"{ns}/{name}")  # the fence's stop, decided on an earlier look
    tj = fake.get("TrainJob", ns, name)
    assert tj is not None and "dispatch.io/stop" not in tj["metadata"].get("annotations", {})
    fake.release_node("n2")
    (ended,) = backend.discover([token], [f"{ns}/{name}"]).objects
    assert ended.state is State.CANCELLED and ended.cause.kind is CauseKind.CANCELLED
    assert ended.cause.actor == "unknown"


def test_a_delete_between_our_look_and_our_mark_stays_theirs(
    fake: FakeApiServer, backend: KubeflowBackend, running  # type: ignore[no-untyped-def]
) -> None:
    """The person's delete lands after dispatch's last look: the mark's answer shows the
    deletion already under way, so the mark is taken back and the delete stays theirs."""
    token, ns, name, pods = running
    _stuck_on_a_lost_node(fake, ns, pods)
    assert look(backend, token).alive
    fake.remove("TrainJob", ns, name, policy="Foreground")
    backend.stop(f"{ns}/{name}")
    tj = fake.get("TrainJob", ns, name)
    assert tj is not None and "dispatch.io/stop" not in tj["metadata"].get("annotations", {})
    fake.release_node("n2")
    (ended,) = backend.discover([token], [f"{ns}/{name}"]).objects
    assert ended.cause.actor == "unknown"


def test_suspend_and_resume(fake: FakeApiServer, backend: KubeflowBackend) -> None:
    token, ns, name = submit(backend, gated=True)
    stored = fake.get("TrainJob", ns, name)
    assert stored is not None and stored["spec"]["suspend"] is True
    tr.set_conditions(
        fake,
        "TrainJob",
        ns,
        name,
        tr.cond("Suspended", reason="Suspended", message="TrainJob is suspended"),
    )
    held = look(backend, token)
    assert held.state is State.HELD and held.gated
    assert held.cause.kind is CauseKind.HELD
    assert held.cause.provenance is Provenance.ACTOR and held.cause.actor == "dispatch"
    backend.open_gate(held.ref)
    stored = fake.get("TrainJob", ns, name)
    assert stored is not None and stored["spec"]["suspend"] is False
    tr.set_conditions(
        fake,
        "TrainJob",
        ns,
        name,
        tr.cond("Suspended", "False", "Resumed", "TrainJob is resumed", at=tr.T2),
    )
    resumed = look(backend, token)
    assert resumed.state is State.PENDING and not resumed.gated
    assert resumed.cause.kind is CauseKind.RELEASED


@pytest.fixture
def listing(fake: FakeApiServer, tmp_path: Path, clock: Clock) -> Iterator[KubeflowBackend]:
    """The per-tick list path (informer=False), kept as the fallback and for one-shot tools."""
    b = make_backend(fake, tmp_path, clock, informer=False)
    yield b
    b.close()


@pytest.mark.parametrize("jobs", [1, 12])
def test_calls_per_discover_are_constant_in_the_number_of_jobs(
    fake: FakeApiServer, listing: KubeflowBackend, jobs: int
) -> None:
    backend = listing
    for n in NODES:
        fake.put(tr.node(n))
    tokens, refs = [], []
    for i in range(jobs):
        token, ns, name = submit(backend, job=f"job-{i}")
        tr.materialize(fake, ns, name, NODES)
        tokens.append(token)
        refs.append(f"{ns}/{name}")
    fake.reset_requests()
    found = backend.discover(tokens, refs)
    assert len(found.objects) == jobs
    assert all(o.state is State.RUNNING for o in found.objects)
    # One namespace: TrainJobs, JobSets, Jobs, Pods, its Warning Events, then Nodes: six GETs,
    # whatever ``jobs``.
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in fake.requests] == [
        ("GET", "trainjobs"),
        ("GET", "jobsets"),
        ("GET", "jobs"),
        ("GET", "pods"),
        ("GET", "events"),
        ("GET", "nodes"),
    ]
    assert fake.requests[0].query["labelSelector"] == "dispatch.io/managed=true"


def test_second_namespace_adds_one_set_of_lists(
    fake: FakeApiServer, listing: KubeflowBackend
) -> None:
    backend = listing
    token, ns, name = submit(backend)
    fake.reset_requests()
    backend.discover([token], [f"{ns}/{name}", "other/train-x"])
    assert len(fake.requests) == 11  # 5 per namespace (Warning Events included) + nodes


# -- transport: unreachable is never a state ----------------------------------------------------
# One-shot faults on the list path (informer=False): an informer heals them by itself on its next
# LIST; its own outage tests are in test_kubeflow_informer.py.


def test_5xx_is_retried_then_answered(fake: FakeApiServer, listing: KubeflowBackend) -> None:
    backend = listing
    token, _, _ = submit(backend)
    fake.fail_next(1, code=503)
    assert look(backend, token).token == token


def test_5xx_after_retries_is_unreachable(fake: FakeApiServer, listing: KubeflowBackend) -> None:
    backend = listing
    token, _, _ = submit(backend)
    fake.fail_next(2, code=500)
    with pytest.raises(SchedulerUnreachable) as err:
        backend.discover([token], [])
    assert err.value.backend == "kubeflow" and "500" in err.value.reason


def test_stopped_api_server_is_unreachable(fake: FakeApiServer, backend: KubeflowBackend) -> None:
    token, ns, name = submit(backend)
    fake.stop()
    with pytest.raises(SchedulerUnreachable) as err:
        backend.discover([token], [f"{ns}/{name}"])
    assert "Connect" in err.value.reason
    with pytest.raises(SchedulerUnreachable):
        backend.stop(f"{ns}/{name}")


def test_timeout_is_unreachable(fake: FakeApiServer, tmp_path: Path, clock: Clock) -> None:
    slow = make_backend(fake, tmp_path, clock, timeout_s=0.3, retries=0, informer=False)
    fake.hang_next(1.0)
    with pytest.raises(SchedulerUnreachable) as err:
        slow.discover(["x.0"], [])
    assert "Timeout" in err.value.reason
    slow.close()


def test_refused_namespace_makes_an_incomplete_look(
    fake: FakeApiServer, listing: KubeflowBackend
) -> None:
    backend = listing
    token, ns, name = submit(backend)
    fake.fail_next(1, code=403, match=lambda m, p: "/namespaces/team/trainjobs" in p)
    found = backend.discover([token], [f"{ns}/{name}"])
    assert not found.complete
    assert found.objects == ()  # no made-up "gone" for what it could not see


def test_submit_refused_by_the_api_server_carries_its_words(
    fake: FakeApiServer, backend: KubeflowBackend
) -> None:
    fake.fail_next(1, code=403, match=lambda m, p: m == "POST")
    with pytest.raises(SubmitRejected) as err:
        submit(backend)
    assert "403" in err.value.detail


def test_name_collision_with_another_token_is_refused(
    fake: FakeApiServer, backend: KubeflowBackend
) -> None:
    token, ns, name = submit(backend)
    fake.update("TrainJob", ns, name, {"metadata": {"labels": {"dispatch.io/token": "other.0"}}})
    with pytest.raises(SubmitRejected) as err:
        submit(backend)
    assert "does not carry token" in err.value.detail


def test_open_gate_of_a_gone_trainjob(fake: FakeApiServer, backend: KubeflowBackend) -> None:
    _, ns, name = submit(backend, gated=True)
    fake.remove("TrainJob", ns, name)
    with pytest.raises(ObjectGone):
        backend.open_gate(f"{ns}/{name}")


def test_node_list_forbidden_still_fences_on_a_node_loss_disruption(
    fake: FakeApiServer,
    backend: KubeflowBackend,
    running,  # type: ignore[no-untyped-def]
) -> None:
    token, ns, name, pods = running
    # A Job's FailureTarget alone is not node loss (issue 35, M3)...
    tr.set_conditions(
        fake,
        "Job",
        ns,
        f"{name}-node-0",
        tr.builtin_cond("FailureTarget", reason="PodFailurePolicy", at=tr.T1),
    )
    fake.fail_next(1, code=403, match=lambda m, p: p.endswith("/nodes"))
    assert look(backend, token).cause.kind is not CauseKind.NODE_LOST
    # ...the taint manager's DisruptionTarget on the pod is, without the nodes.
    tr.set_conditions(
        fake, "Pod", ns, pods[1],
        tr.builtin_cond("DisruptionTarget", reason="DeletionByTaintManager", at=tr.T1),
    )
    fake.fail_next(1, code=403, match=lambda m, p: p.endswith("/nodes"))
    report = look(backend, token)
    assert report.cause.kind is CauseKind.NODE_LOST
    assert report.lost_since == datetime(2026, 3, 1, 10, 5, tzinfo=UTC)


def test_the_stand_in_refuses_and_records_a_schema_violation(
    fake: FakeApiServer, backend: KubeflowBackend
) -> None:
    from dispatch.backends.kubeflow.client import ApiAnswer, TrainJobRes

    bad = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "bad", "namespace": "team"},
        "spec": {"runtimeRef": {"name": "t"}, "trainer": {"numNodes": "two"}},
    }
    with pytest.raises(ApiAnswer) as err:
        backend.kube.create(TrainJobRes, bad)
    assert err.value.code == 422 and "numNodes" in err.value.message
    assert len(fake.violations) == 1
    with pytest.raises(AssertionError):
        fake.put({**bad, "status": {"conditions": [{"type": "Failed"}]}})  # a bad fixture fails
    fake.violations.clear()  # seen and asserted here; the fixture would fail the test otherwise


def test_a_trainjob_whose_objects_cannot_be_made_is_launch_failed_from_its_event(
    fake: FakeApiServer, backend: KubeflowBackend
) -> None:
    # M5: Trainer reports TrainJobResourcesCreationFailed only as an Event (v2.3.0
    # trainjob_controller.go); read from the namespace's one Warning Events watch.
    for n in NODES:
        fake.put(tr.node(n))
    token, ns, name = submit(backend)
    tj = fake.get("TrainJob", ns, name)
    assert tj is not None
    words = "TrainJob resources reconciliation failed: admission webhook denied the JobSet"
    fake.put(tr.event(ns, tj, "TrainJobResourcesCreationFailed", words, count=3))
    fake.put(tr.event(ns, tj, "Scheduled", "not a warning", etype="Normal"))
    report = look(backend, token)
    assert (report.state, report.cause.kind) == (State.PENDING, CauseKind.LAUNCH_FAILED)
    assert words in report.cause.detail and "count=3" in report.cause.detail
    # Trainer retried and made the JobSet: the Event no longer holds.
    tr.materialize(fake, ns, name, NODES)
    assert look(backend, token).state is State.RUNNING


def test_a_webhook_rejection_at_create_carries_the_webhooks_words_and_is_bad_input(
    fake: FakeApiServer, backend: KubeflowBackend
) -> None:
    # M5: the API server answers a denied admission with the webhook's words
    # (k8s.io/apiserver webhook errors.ToStatusErr: 'admission webhook "..." denied the request: ').
    words = ('admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
             'spec.trainer.numNodes: Invalid value: 0: must be greater than or equal to 1')
    fake.fail_next(1, code=422, match=lambda m, p: m == "POST", reason="Invalid", message=words)
    with pytest.raises(SubmitRejected) as err:
        submit(backend)
    assert words in err.value.detail
    assert err.value.exit_code == 2  # the CLI's bad-input exit


def test_a_look_that_cannot_read_the_nodes_is_no_recovery_of_a_lost_node(
    fake: FakeApiServer, tmp_path: Path, clock: Clock
) -> None:
    # A restarted API server answers 403 for a moment, before its authorizer is ready (seen
    # in the fault-apiserver recording). A job lost by its node's condition is not read as
    # recovered from a look without the nodes: that look is incomplete, for a bounded time.
    lists = make_backend(fake, tmp_path, clock, informer=False)
    try:
        for n in NODES:
            fake.put(tr.node(n))
        token, ns, name = submit(lists)
        tr.materialize(fake, ns, name, NODES)
        fake.put(tr.node("n2", lost=True, since="2026-03-01T10:05:00Z"))
        lost = look(lists, token)
        assert lost.cause.kind is CauseKind.NODE_LOST and lost.lost_since is not None
        fake.fail_next(1, code=403, match=lambda m, p: p.endswith("/nodes"))
        blind = lists.discover([token], [])
        assert not blind.complete and not blind.objects, blind
        again = look(lists, token)
        assert again.cause.kind is CauseKind.NODE_LOST and again.lost_since == lost.lost_since
        # Refused for longer than evidence_grace (RBAC changed for good): read as it reads,
        # never incomplete for ever.
        fake.fail_next(2, code=403, match=lambda m, p: p.endswith("/nodes"))
        assert not lists.discover([token], []).complete
        clock.now += timedelta(seconds=11)
        later = look(lists, token)
        assert later.state is State.RUNNING and later.cause.kind is CauseKind.NONE
    finally:
        lists.close()
