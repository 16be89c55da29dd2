"""The list+watch cache (docs/semantics.md#p2 on Kubernetes) on the stand-in: a steady tick costs no
request, a pod failure arrives by watch, 410 Gone leads to a fresh list, an outage longer than
the bound is SchedulerUnreachable (never an answer from a stale cache), and it recovers.

Waits here are bounded polls for something to happen, never assertions on how long it took."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubeflow_support import Clock, caught_up, make_backend
from test_kubeflow_scenarios import NODES, fail, submit

from dispatch.backends.kubeflow import KubeflowBackend
from dispatch.backends.kubeflow.backend import DEFAULT_EVIDENCE_GRACE
from dispatch.backends.kubeflow.informer import InformerSettings
from dispatch.core.model import CauseKind, SchedulerUnreachable, State
from kube_fake import FakeApiServer
from kube_fake import trainer as tr

BOUND_S = 10.0


def eventually(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def plain_discover(backend: KubeflowBackend, tokens: list[str], refs: list[str]):  # type: ignore[no-untyped-def]
    """discover() without the test's wait for the watch: what a supervisor tick does."""
    return KubeflowBackend.discover(backend, tokens, refs)


def lists(fake: FakeApiServer) -> list[str]:
    return [r.path for r in fake.requests if r.method == "GET" and "watch" not in r.query]


@pytest.fixture
def jobs(fake: FakeApiServer, backend: KubeflowBackend) -> tuple[list[str], list[str]]:
    for n in NODES:
        fake.put(tr.node(n))
    tokens, refs = [], []
    for i in range(3):
        token, ns, name = submit(backend, job=f"job-{i}")
        tr.materialize(fake, ns, name, NODES)
        tokens.append(token)
        refs.append(f"{ns}/{name}")
    found = backend.discover(tokens, refs)
    assert [o.state for o in found.objects] == [State.RUNNING] * 3
    assert eventually(lambda: fake.open_watches() == 6)  # every collection listed and watched
    return tokens, refs


def test_first_tick_lists_and_watches_then_a_steady_tick_makes_no_request(
    fake: FakeApiServer, tmp_path: Path, clock: Clock
) -> None:
    for n in NODES:
        fake.put(tr.node(n))
    fresh = make_backend(fake, tmp_path, clock)
    token, ns, name = submit(fresh)
    tr.materialize(fake, ns, name, NODES)
    fake.reset_requests()
    fresh.discover([token], [f"{ns}/{name}"])
    # The first tick: one LIST per collection (5 in the namespace, its Warning Events included,
    # + nodes), then their WATCHes.
    assert sorted(p.rsplit("/", 1)[-1] for p in lists(fake)) == sorted(
        ["trainjobs", "jobsets", "jobs", "pods", "events", "nodes"]
    )
    assert eventually(lambda: fake.open_watches() == 6)
    assert caught_up(fresh, fake)
    fake.reset_requests()
    for _ in range(3):
        (report,) = fresh.discover([token], [f"{ns}/{name}"]).objects
        assert report.state is State.RUNNING
    assert fake.requests == []
    fresh.close()
    assert eventually(lambda: fake.open_watches() == 0)  # close() ends its watches


def test_steady_ticks_make_no_request_whatever_the_number_of_jobs(
    fake: FakeApiServer, backend: KubeflowBackend, jobs: tuple[list[str], list[str]]
) -> None:
    tokens, refs = jobs
    assert caught_up(backend, fake)
    fake.reset_requests()
    for _ in range(5):
        found = plain_discover(backend, tokens, refs)
        assert found.complete and len(found.objects) == 3
    assert fake.requests == []


def test_a_pod_failure_arrives_by_watch_without_a_list(
    fake: FakeApiServer, backend: KubeflowBackend, jobs: tuple[list[str], list[str]]
) -> None:
    tokens, refs = jobs
    ns, name = refs[1].split("/")
    fake.reset_requests()
    pod = f"{name}-node-0-0-x0k0"
    tr.terminate(fake, ns, pod, reason="OOMKilled", exit_code=137)
    fail(fake, ns, name)

    def failed() -> bool:
        # A look that saw the TrainJob's Failed before the pod's termination is incomplete and
        # leaves the job out (issue 35, M11): never a failed/unknown committed from it.
        found = plain_discover(backend, [tokens[1]], [refs[1]]).objects
        return any(o.state is State.FAILED for o in found)

    assert eventually(failed)
    (report,) = plain_discover(backend, [tokens[1]], [refs[1]]).objects
    assert report.cause.kind is CauseKind.OUT_OF_MEMORY
    # No list, no watch re-opened: the events came on open watches. The one request is the
    # failed container's last log lines (it left no termination message; issue 23), read once
    # however many looks there were.
    assert [(r.method, r.path) for r in fake.requests] == [
        ("GET", f"/api/v1/namespaces/{ns}/pods/{pod}/log")]


def test_a_failed_end_seen_before_its_pods_evidence_waits_for_it(
    fake: FakeApiServer, backend: KubeflowBackend, jobs: tuple[list[str], list[str]], clock: Clock
) -> None:
    # M11: the TrainJob's Failed arrives on its watch; the pod's OOMKilled is not yet written.
    tokens, refs = jobs
    ns, name = refs[1].split("/")
    fail(fake, ns, name)
    assert caught_up(backend, fake)
    early = plain_discover(backend, [tokens[1]], [refs[1]])
    assert not early.complete and early.objects == ()  # not committed from this look
    tr.terminate(fake, ns, f"{name}-node-0-0-x0k0", reason="OOMKilled", exit_code=137)
    assert caught_up(backend, fake)
    (report,) = plain_discover(backend, [tokens[1]], [refs[1]]).objects
    assert report.state is State.FAILED and report.cause.kind is CauseKind.OUT_OF_MEMORY


def test_a_failed_end_without_evidence_is_committed_unknown_after_the_grace(
    fake: FakeApiServer, backend: KubeflowBackend, jobs: tuple[list[str], list[str]], clock: Clock
) -> None:
    tokens, refs = jobs
    ns, name = refs[1].split("/")
    fail(fake, ns, name)
    assert caught_up(backend, fake)
    assert plain_discover(backend, [tokens[1]], [refs[1]]).objects == ()
    clock.now += DEFAULT_EVIDENCE_GRACE
    found = plain_discover(backend, [tokens[1]], [refs[1]])
    (report,) = found.objects
    assert found.complete and report.state is State.FAILED
    assert report.cause.kind is CauseKind.UNKNOWN and "FailedJobs" in report.cause.detail


def test_the_exit_code_and_message_survive_the_job_controller_deleting_the_pod(
    fake: FakeApiServer, backend: KubeflowBackend, jobs: tuple[list[str], list[str]]
) -> None:
    # M2: past backoffLimit the Job controller deletes the pods, then Job, JobSet and
    # TrainJob go Failed: the termination was seen once by the informer and is kept.
    tokens, refs = jobs
    ns, name = refs[1].split("/")
    pod = f"{name}-node-0-0-x0k0"
    tr.terminate(fake, ns, pod, reason="Error", exit_code=3, message="ValueError: bad lr")
    fake.remove("Pod", ns, pod)
    assert caught_up(backend, fake)
    fail(fake, ns, name)
    assert caught_up(backend, fake)
    (report,) = plain_discover(backend, [tokens[1]], [refs[1]]).objects
    assert report.state is State.FAILED
    assert report.cause.kind is CauseKind.NON_ZERO_EXIT and report.cause.exit_code == 3
    error = report.executions[-1].error
    assert error is not None and "ValueError: bad lr" in error.message


def test_410_gone_leads_to_a_fresh_list_and_a_correct_cache(
    fake: FakeApiServer, backend: KubeflowBackend, jobs: tuple[list[str], list[str]]
) -> None:
    tokens, refs = jobs
    informer = backend.informer
    assert informer is not None
    before = informer.lists()
    # While the watches are down, things change and the history they would resume from is gone.
    fake.compact()
    ns, gone = refs[0].split("/")
    fake.remove("TrainJob", ns, gone)  # (with its JobSet, Jobs and Pods)
    _, failing = refs[2].split("/")
    tr.terminate(fake, ns, f"{failing}-node-0-0-x0k0", reason="Error", exit_code=3)
    fail(fake, ns, failing)
    fake.compact()
    fake.reset_requests()
    fake.drop_watches()  # each re-WATCHes from its old version: 410 Expired, then a LIST
    assert eventually(lambda: informer.lists() >= before + 6)
    assert sorted(p.rsplit("/", 1)[-1] for p in lists(fake)) == sorted(
        ["trainjobs", "jobsets", "jobs", "pods", "events", "nodes"]
    )
    found = {o.ref: o for o in backend.discover(tokens, refs).objects}
    assert found[refs[0]].state is State.CANCELLED  # removed during the gap: not in the cache
    assert found[refs[1]].state is State.RUNNING
    assert found[refs[2]].state is State.FAILED
    assert found[refs[2]].cause.kind is CauseKind.NON_ZERO_EXIT


@pytest.fixture
def short_bound(fake: FakeApiServer, tmp_path: Path, clock: Clock) -> Iterator[KubeflowBackend]:
    settings = InformerSettings(stale_after_s=0.3, backoff_s=0.05, max_backoff_s=0.1)
    b = make_backend(fake, tmp_path, clock, informer_settings=settings)
    yield b
    b.close()


def test_an_outage_past_the_bound_is_unreachable_and_it_recovers(
    fake: FakeApiServer, short_bound: KubeflowBackend
) -> None:
    backend = short_bound
    for n in NODES:
        fake.put(tr.node(n))
    token, ns, name = submit(backend)
    pods = tr.materialize(fake, ns, name, NODES)
    ref = f"{ns}/{name}"
    assert backend.discover([token], [ref]).objects[0].state is State.RUNNING
    fake.stop()

    def unreachable() -> bool:
        try:
            plain_discover(backend, [token], [ref])
        except SchedulerUnreachable as err:
            assert err.backend == "kubeflow" and "watch broken" in err.reason
            return True
        return False

    assert eventually(unreachable)
    assert unreachable()  # and it stays so while the API server is away
    # What happens during the outage is seen once it is back: a fresh LIST, not a stale cache.
    tr.terminate(fake, ns, pods[0], reason="Error", exit_code=3)
    fail(fake, ns, name)
    fake.start()  # the same port

    def recovered() -> bool:
        try:
            (report,) = plain_discover(backend, [token], [ref]).objects
        except SchedulerUnreachable:
            return False
        return report.state is State.FAILED

    assert eventually(recovered)
    (report,) = plain_discover(backend, [token], [ref]).objects
    assert report.cause.kind is CauseKind.NON_ZERO_EXIT and report.cause.exit_code == 3


def test_never_listed_is_unreachable(fake: FakeApiServer, short_bound: KubeflowBackend) -> None:
    token, ns, name = submit(short_bound)
    fake.stop()
    with pytest.raises(SchedulerUnreachable) as err:
        plain_discover(short_bound, [token], [f"{ns}/{name}"])
    assert "Connect" in err.value.reason


def test_own_writes_are_read_back_from_the_cache(
    fake: FakeApiServer, backend: KubeflowBackend, jobs: tuple[list[str], list[str]]
) -> None:
    # A TrainJob just created is never reported gone because its ADDED event is on the wire;
    # a gate just opened is not reported shut; a delete just made is seen.
    for i in range(5):
        token, ns, name = submit(backend, job=f"new-{i}", gated=True)
        ref = f"{ns}/{name}"
        (made,) = plain_discover(backend, [token], [ref]).objects
        assert made.state is not State.CANCELLED and made.gated
        backend.open_gate(ref)
        (opened,) = plain_discover(backend, [token], [ref]).objects
        assert not opened.gated
        backend.cancel(ref)
        (gone,) = plain_discover(backend, [token], [ref]).objects
        assert gone.state is State.CANCELLED and gone.cause.actor == "dispatch"


def test_every_watch_silent_asks_the_server_and_no_answer_is_unreachable(
    fake: FakeApiServer, tmp_path: Path, clock: Clock
) -> None:
    # A stopped API server (SIGSTOP, a stall) keeps the watches open and says nothing: only a
    # request tells that from a quiet cluster. Bound 0 here: every look asks GET /version.
    settings = InformerSettings(stall_after_s=0.0, backoff_s=0.05, max_backoff_s=0.1)
    backend = make_backend(fake, tmp_path, clock, informer_settings=settings)
    try:
        for n in NODES:
            fake.put(tr.node(n))
        token, ns, name = submit(backend)
        pods = tr.materialize(fake, ns, name, NODES)
        ref = f"{ns}/{name}"
        # The stand-in answers /version 404: an answer, so the server lives.
        assert backend.discover([token], [ref]).objects[0].state is State.RUNNING
        assert ("GET", "/version") in [(r.method, r.path) for r in fake.requests]
        fake.hang_next(5.0, match=lambda method, path: path == "/version")
        with pytest.raises(SchedulerUnreachable) as err:
            plain_discover(backend, [token], [ref])
        assert "no watch event or bookmark" in err.value.reason
        assert "does not answer" in err.value.reason
        # Once it answers, the collections have been listed again: what changed is seen.
        tr.terminate(fake, ns, pods[0], reason="Error", exit_code=3)
        fail(fake, ns, name)

        def recovered() -> bool:
            try:
                look = plain_discover(backend, [token], [ref])
            except SchedulerUnreachable:
                return False
            if not look.complete:  # relisting: an incomplete look, never an answer (S16)
                return False
            (report,) = look.objects
            return report.state is State.FAILED

        assert eventually(recovered)
    finally:
        backend.close()


def test_a_first_list_is_read_in_pages_and_keeps_only_the_projection(
    fake: FakeApiServer, tmp_path: Path, clock: Clock
) -> None:
    """Issue 49: the first LIST of 5,000 TrainJobs held every full object at once (441 MiB
    before the projection). It is read in pages of LIST_PAGE (``limit``, ``continue``), each
    object projected as its page arrives; every page's objects reach the cache."""
    from dispatch.backends.kubeflow.client import LIST_PAGE
    from dispatch.backends.kubeflow.objects import MANAGED_LABEL

    LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"  # noqa: N806 - kubectl's

    for n in NODES:
        fake.put(tr.node(n))
    fresh = make_backend(fake, tmp_path, clock)
    token, ns, name = submit(fresh)  # its TrainJob sorts after the others: the last page
    others = 2 * LIST_PAGE + 7
    for i in range(others):
        tj = fake.get("TrainJob", ns, name)
        assert tj is not None
        tj = {**tj, "metadata": {"name": f"a-{i:05d}", "namespace": ns,
                                 "labels": {MANAGED_LABEL: "true"},
                                 "annotations": {LAST_APPLIED: "{...}" * 100}}}
        fake.put(tj)
    fake.reset_requests()
    (report,) = fresh.discover([token], [f"{ns}/{name}"]).objects
    assert report.ref == f"{ns}/{name}"
    pages = [r for r in fake.requests if r.method == "GET" and "watch" not in r.query
             and r.path.endswith("/trainjobs")]
    assert [r.query.get("limit") for r in pages] == [str(LIST_PAGE)] * 3, pages
    assert [bool(r.query.get("continue")) for r in pages] == [False, True, True]
    informer = fresh._informer
    assert informer is not None
    (cached,) = [r.items for w, r in informer._reflectors.items()
                 if w.what == f"TrainJob in {ns}"]
    assert len(cached) == others + 1
    assert not any(LAST_APPLIED in o["metadata"].get("annotations", {})
                   for o in cached.values())


def test_a_list_whose_continue_expired_is_read_again_whole(
    fake: FakeApiServer, tmp_path: Path, clock: Clock
) -> None:
    """etcd compacted the snapshot of a paged LIST while it was read (410 Expired on its
    continue token): the list is asked again without pages, as client-go's reflector does,
    never taken for a refusal (which would leave the namespace out of the look)."""
    from dispatch.backends.kubeflow.client import LIST_PAGE
    from dispatch.backends.kubeflow.objects import MANAGED_LABEL

    for n in NODES:
        fake.put(tr.node(n))
    fresh = make_backend(fake, tmp_path, clock)
    token, ns, name = submit(fresh)
    for i in range(LIST_PAGE + 1):
        tj = fake.get("TrainJob", ns, name)
        assert tj is not None
        fake.put({**tj, "metadata": {"name": f"a-{i:05d}", "namespace": ns,
                                     "labels": {MANAGED_LABEL: "true"}}})
    fake.reset_requests()
    fake.compact_after_page = True
    (report,) = fresh.discover([token], [f"{ns}/{name}"]).objects
    assert report.ref == f"{ns}/{name}"
    pages = [r for r in fake.requests if r.method == "GET" and "watch" not in r.query
             and r.path.endswith("/trainjobs")]
    assert [(r.query.get("limit"), bool(r.query.get("continue"))) for r in pages] == [
        (str(LIST_PAGE), False), (str(LIST_PAGE), True), (None, False)], pages
    informer = fresh._informer
    assert informer is not None
    (reflector,) = [r for w, r in informer._reflectors.items() if w.what == f"TrainJob in {ns}"]
    assert reflector.refused is None and len(reflector.items) == LIST_PAGE + 2
