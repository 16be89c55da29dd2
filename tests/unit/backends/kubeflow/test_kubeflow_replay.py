"""The kubeflow backend's reading of what the real controllers wrote (Trainer v2.3.0, JobSet
v0.12.0, Kubernetes v1.36.3's Job controller, KWOK pods; time-limit and deleted on the real
nodes' kubelets, issue 46), replayed: every watch event of
scenarios 1-9 as dispatch's watches received them on the testbed, in that order across the
watches (tests/fixtures/k8s-recorded/, recorded by tests/integration/k8s/record_fixtures.py).

The backend discovers after each event, at the time the event was received, so every
intermediate reading is checked, not only the end: a crash loop read while it happens, the Job
controller deleting the failed pod before the TrainJob says Failed, the TrainJob's Failed
arriving on its watch before the pod's last word on another.

Every scenario test runs through both ways discover() reads (the ``path`` fixture): lists per
tick (``informer=False``: each look lists the state the events so far leave) and the informer,
the default (its reflectors LIST once before the first event, then each event arrives on its
own collection's watch, through the real ``WatchStream``, reflector, cache and view, lock-step
with the replay: no thread races it). One test checks that both read every recording look for
look alike. In the recorded order no look of any recording awaits its pods' evidence (M11), so
one test also replays the failures with the pods' watch behind the others (the TrainJob's
Failed before the pod's end, each watch in its own order): no look commits another cause (one
without the evidence is left out, never committed as unknown). Not replayed here: this
process's own writes (the informer's expectations: the informer's own tests, on the stand-in)
and watch failures (re-LIST, 410, staleness: the fault recordings, fault-*.jsonl, replayed by
test_kubeflow_replay_faults.py)."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import msgspec
import pytest

from dispatch.backends.kubeflow import KubeflowBackend
from dispatch.backends.kubeflow.client import ApiAnswer, Objects, ResourceType, WatchStream
from dispatch.backends.kubeflow.objects import TOKEN_LABEL
from dispatch.core.model import CauseKind, ObjectReport, Provenance, State
from dispatch.core.policy import RecoveryPolicy

# The recorder's policy (tests/integration/k8s/record_fixtures.py).
RESUBMIT = {"rules": [{"on": ["preempted", "node-lost"], "action": "resubmit", "budget": 2},
                      {"on": ["non-zero-exit"], "action": "resubmit", "budget": 1}]}

RECORDED = Path(__file__).resolve().parents[3] / "fixtures" / "k8s-recorded"


class Replayed:
    """The API server's state as the recorded events leave it; answers lists as a client
    would be answered (the recording holds only what dispatch's selectors select), and, for
    the informer, LISTs from that state and WATCHes that carry the recorded events.

    A watch is a real ``WatchStream`` over a ``Wire`` (its HTTP response): ``deliver`` sends one
    event down its collection's wire and returns once the reflector has applied it (the
    reflector asks the wire for its next line only after its ``_apply``), so the informer's
    threads never race the replay: each look sees exactly the events received before it."""

    default_namespace = "dispatch"

    def __init__(self) -> None:
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self.wires: dict[tuple[str, str | None], Wire] = {}  # (kind, namespace) -> its watch
        self.requests: list[str] = []  # "list", "LIST" (the informer's), "WATCH"

    def apply(self, line: dict[str, Any]) -> None:
        obj = line["object"]
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        kept = self.objects.setdefault(line["kind"], {})
        if line["type"] == "DELETED":
            kept.pop(key, None)
        else:
            kept[key] = obj

    def state(self, res: ResourceType, namespace: str | None) -> list[dict[str, Any]]:
        kind = res._api_info.resource.kind
        return [
            o
            for (ns, _), o in self.objects.get(kind, {}).items()
            if namespace is None or ns == namespace
        ]

    def list(
        self, res: ResourceType, namespace: str | None, labels: Any, fields: Any = None
    ) -> list[dict[str, Any]]:
        self.requests.append("list")
        return self.state(res, namespace)

    def list_versioned(
        self, res: ResourceType, namespace: str | None, labels: Any, fields: Any = None,
        keep: Any = None,
    ) -> tuple[Objects, str]:
        self.requests.append("LIST")
        self.wires.setdefault((res._api_info.resource.kind, namespace), Wire())
        items = json.loads(json.dumps(self.state(res, namespace)))  # as on the wire
        return [keep(o) for o in items] if keep is not None else items, "0"

    def open_watch(
        self, res: ResourceType, namespace: str | None, labels: Any, resource_version: str,
        server_timeout_s: int, fields: Any = None,
    ) -> WatchStream:
        self.requests.append("WATCH")
        wire = self.wires[(res._api_info.resource.kind, namespace)]
        return WatchStream(wire, f"watch {res._api_info.resource.kind} in {namespace}")

    def deliver(self, line: dict[str, Any]) -> None:
        """The event on its collection's watch, applied by the reflector when this returns."""
        wire = self.wires[(line["kind"], line["object"]["metadata"].get("namespace"))]
        wire.lines.put(json.dumps({"type": line["type"], "object": line["object"]}))
        assert wire.applied.acquire(timeout=30), f"not applied: {line['kind']} {line['seq']}"

    def probe(self) -> None:
        return None  # the API server answers

    def pod_log(self, namespace: str, pod: str, params: Any) -> bytes:
        raise ApiAnswer(404, "NotFound", "a recording has no logs")

    def close(self) -> None:
        return None


class Wire:
    """A watch's HTTP response as ``WatchStream`` reads it: one JSON line per event; the
    reflector's asking for the next line says it has applied the last one; ``abort()``
    (``close()``) ends it through the stream's socket as it would a real one."""

    def __init__(self) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.applied = threading.Semaphore(0)
        self.extensions = {"network_stream": self}

    def iter_lines(self) -> Iterator[str]:
        while (line := self.lines.get()) is not None:
            yield line
            self.applied.release()

    def get_extra_info(self, what: str) -> Wire:
        return self

    def shutdown(self, how: int) -> None:
        self.lines.put(None)

    def close(self) -> None:
        return None


Path_ = Literal["lists", "informer"]



def replay(
    scenario: str, path: Path_, nth: int = 0, *, pods_lag: bool = False
) -> list[ObjectReport | None]:
    """What discover() reported of the scenario's TrainJob (dispatch's ``nth``: a
    resubmission's is another object, another ref) after each event from its creation on
    (None: left out of that look, which was incomplete). On the informer path every
    collection is LISTed once, before the first event (the recording's LISTED lines: what the
    recorder's own LISTs answered), and every event after arrives on its collection's watch.
    ``pods_lag``: in the order of ``pods_lagging``, not as recorded."""
    lines = pods_lagging(recorded(scenario)) if pods_lag else recorded(scenario)
    made = [ln["object"] for ln in lines if ln["kind"] == "TrainJob" and ln["type"] == "ADDED"]
    added = made[nth]
    ref = f"{added['metadata']['namespace']}/{added['metadata']['name']}"
    token = added["metadata"]["labels"][TOKEN_LABEL]
    api = Replayed()
    now: list[datetime] = [datetime.fromisoformat(lines[0]["at"])]
    backend = KubeflowBackend(
        client=api,  # type: ignore[arg-type]
        namespaces=[added["metadata"]["namespace"]],
        informer=path == "informer",
        clock=lambda: now[-1],
    )
    readings: list[ObjectReport | None] = []
    seen = False
    try:
        for line in [ln for ln in lines if ln["type"] == "LISTED"]:
            api.apply(line)
        assert backend.discover([], []).complete  # the first look: the informer LISTs here
        for line in [ln for ln in lines if ln["type"] != "LISTED"]:
            api.apply(line)
            if path == "informer":
                api.deliver(line)
            seen = seen or line["object"] is added
            if not seen:
                continue
            now.append(datetime.fromisoformat(line["at"]))
            found = backend.discover([token], [ref])
            (report,) = [o for o in found.objects if o.ref == ref] or (None,)
            assert report is not None or not found.complete
            readings.append(report)
        if path == "informer":
            # one LIST per collection (4, the Warning Events, the Nodes) and at most one WATCH
            # (a quiet one may not be open yet), then every look from the cache: no list per
            # tick, no re-LIST, no watch reopened
            asked = api.requests
            assert "list" not in asked and asked.count("LIST") == 6, asked
            assert asked.count("WATCH") <= 6, asked
    finally:
        backend.close()
    return readings


def scenarios() -> list[str]:
    """The recorded scenarios (the faults, fault-*.jsonl, have lines of their own: a LIST or
    WATCH's answer, a watch's end; test_kubeflow_replay_faults.py replays them)."""
    return sorted(p.stem for p in RECORDED.glob("*.jsonl") if not p.stem.startswith("fault-"))


def recorded(scenario: str) -> list[dict[str, Any]]:
    text = (RECORDED / f"{scenario}.jsonl").read_text()
    return [json.loads(t) for t in text.splitlines()]


def has_evidence(line: dict[str, Any]) -> bool:
    """A pod event that says how its container ended (or that the pod is going)."""
    if line["kind"] != "Pod":
        return False
    pod = line["object"]
    status = pod.get("status") or {}
    said = [c.get(k) or {} for c in status.get("containerStatuses") or []
            for k in ("state", "lastState")]
    return (line["type"] == "DELETED" or bool(pod["metadata"].get("deletionTimestamp"))
            or status.get("phase") in ("Failed", "Succeeded")
            or any("terminated" in s for s in said))


def pods_lagging(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recording as it would arrive were the pods' watch behind the others (M11): every
    Pod event from the first that shows an end until the TrainJob's Failed comes right after
    that Failed, at its time. Each watch keeps its own order (all the API server promises);
    only the order across watches changes."""
    end = next(i for i, ln in enumerate(lines) if ln["kind"] == "TrainJob" and any(
        c["type"] == "Failed" and c["status"] == "True"
        for c in (ln["object"].get("status") or {}).get("conditions", [])))
    start = next(i for i, ln in enumerate(lines) if has_evidence(ln))
    held = [dict(ln, at=lines[end]["at"]) for ln in lines[start:end] if ln["kind"] == "Pod"]
    assert held and start < end
    others = [ln for ln in lines[start:end] if ln["kind"] != "Pod"]
    return [*lines[:start], *others, lines[end], *held, *lines[end + 1:]]


def kinds(readings: list[ObjectReport | None]) -> list[tuple[State, CauseKind] | None]:
    return [None if r is None else (r.state, r.cause.kind) for r in readings]


def never_pending_once_running(seen: list[tuple[State, CauseKind] | None]) -> None:
    """Pending says a job waits to start: never once it ran (the recording showed 'pending'
    between the pods' end and the controllers' verdict until the mapping read it)."""
    states = [k[0] for k in seen if k is not None]
    ran = states.index(State.RUNNING)
    assert State.PENDING not in states[ran:], seen


def test_success_reads_running_then_succeeded_and_nothing_else(path: Path_) -> None:
    readings = replay("success", path)
    seen = kinds(readings)
    assert seen[-1] == (State.SUCCEEDED, CauseKind.NONE), seen
    assert (State.RUNNING, CauseKind.NONE) in seen
    assert {k for k in seen if k is not None} <= {
        (State.PENDING, CauseKind.NONE),
        (State.RUNNING, CauseKind.NONE),
        (State.SUCCEEDED, CauseKind.NONE),
    }, seen
    never_pending_once_running(seen)
    final = readings[-1]
    assert final is not None and len(final.nodes) == 2, final
    assert final.executions[-1].ended_at is not None  # the Complete condition's time
    assert "Complete=True" in final.cause.detail


def test_exit_3_through_a_crash_loop_is_a_non_zero_exit_with_its_message(path: Path_) -> None:
    readings = replay("exit3", path)
    seen = kinds(readings)
    final = readings[-1]
    assert final is not None and seen[-1] == (State.FAILED, CauseKind.NON_ZERO_EXIT), seen
    assert final.cause.exit_code == 3
    error = final.executions[-1].error
    assert error is not None and error.message == "loss is nan at step 7", final
    # The crash loop is seen while it happens: restarted in place by Kubernetes, not dispatch.
    looping = [r for r in readings if r is not None and r.state is State.RECOVERING]
    assert looping and all(r.cause.kind is CauseKind.NON_ZERO_EXIT for r in looping), seen
    assert "restarted in place by Kubernetes" in looping[-1].cause.note
    # The Job controller deleted the pod before the end was said: its kept evidence still
    # names the node it ran on.
    assert final.nodes and set(final.nodes) <= started_nodes("exit3"), final.nodes
    never = {CauseKind.NODE_LOST, CauseKind.UNKNOWN}
    assert not [k for k in seen if k is not None and k[1] in never], seen
    never_pending_once_running(seen)


def test_oom_killed_through_a_crash_loop_is_out_of_memory(path: Path_) -> None:
    readings = replay("oom", path)
    seen = kinds(readings)
    assert seen[-1] == (State.FAILED, CauseKind.OUT_OF_MEMORY), seen
    final = readings[-1]
    assert final is not None and "reason=OOMKilled" in final.cause.detail, final.cause
    never = {CauseKind.NODE_LOST, CauseKind.UNKNOWN, CauseKind.NON_ZERO_EXIT}
    assert not [k for k in seen if k is not None and k[1] in never], seen
    never_pending_once_running(seen)


@pytest.mark.parametrize("scenario", scenarios())
def test_a_recording_is_of_the_released_controllers(scenario: str) -> None:
    lines = recorded(scenario)
    made = [ln["object"] for ln in lines if ln["kind"] == "TrainJob" and ln["type"] == "ADDED"]
    assert made and {tj["apiVersion"] for tj in made} == {"trainer.kubeflow.org/v1alpha1"}
    kinds_seen = {ln["kind"] for ln in lines if ln["type"] != "LISTED"}
    assert {"TrainJob", "JobSet", "Job", "Pod"} <= kinds_seen


def started_nodes(scenario: str) -> set[str]:
    """The nodes the recording's pods started on (status.startTime set)."""
    return {
        ln["object"]["spec"]["nodeName"]
        for ln in recorded(scenario)
        if ln["kind"] == "Pod" and (ln["object"].get("status") or {}).get("startTime")
    }


def test_exit_3_without_native_restarts_fails_at_once_with_its_message(path: Path_) -> None:
    # dispatch's runtime (restartPolicy Never, backoffLimit 0): no crash loop, one execution.
    readings = replay("exit3-never", path)
    seen = kinds(readings)
    final = readings[-1]
    assert final is not None and seen[-1] == (State.FAILED, CauseKind.NON_ZERO_EXIT), seen
    assert final.cause.exit_code == 3 and len(final.executions) == 1, final
    assert final.cause.provenance is Provenance.APPLICATION
    # the controllers' words and the pod's, verbatim
    assert "reason=FailedJobs" in final.cause.detail and "exitCode=3" in final.cause.detail
    error = final.executions[-1].error
    assert error is not None and error.message == "bad batch" and error.exit_code == 3, final
    assert (State.RUNNING, CauseKind.NONE) in seen
    never = {CauseKind.NODE_LOST, CauseKind.UNKNOWN}
    assert not [k for k in seen if k is not None and (k[0] is State.RECOVERING or k[1] in never)]
    never_pending_once_running(seen)


def test_the_time_limit_is_time_limit_on_the_nodes_it_ran_on(path: Path_) -> None:
    # Trainer deletes the JobSet at DeadlineExceeded and then re-applies it: a new pod is made
    # and bound to another node, and never starts. The run ended where its pods ran.
    readings = replay("time-limit", path)
    seen = kinds(readings)
    assert seen[-1] == (State.FAILED, CauseKind.TIME_LIMIT), seen
    ran = started_nodes("time-limit")
    ended = [r for r in readings if r is not None and r.state is State.FAILED]
    assert ended and all(set(r.nodes) <= ran for r in ended), [r.nodes for r in ended]
    assert all(set(r.executions[-1].nodes) <= ran for r in ended)
    never = {CauseKind.NODE_LOST, CauseKind.UNKNOWN, CauseKind.NON_ZERO_EXIT}
    assert not [k for k in seen if k is not None and k[1] in never], seen
    never_pending_once_running(seen)


def trainjobs_added(scenario: str) -> list[dict[str, Any]]:
    return [ln for ln in recorded(scenario) if ln["kind"] == "TrainJob" and ln["type"] == "ADDED"]


def every_trainjob() -> list[tuple[str, int]]:
    return [(stem, nth) for stem in scenarios() for nth in range(len(trainjobs_added(stem)))]


@pytest.mark.parametrize(("scenario", "nth"), every_trainjob())
def test_the_informer_reads_every_recording_look_for_look_as_the_lists_do(
    scenario: str, nth: int
) -> None:
    # Each event on its own collection's watch, a deleted pod's evidence kept by the cache
    # as well as by the backend: no look reads otherwise than the lists' of the same moment.
    lists, informer = replay(scenario, "lists", nth), replay(scenario, "informer", nth)
    assert len(lists) == len(informer) > 0
    differ = [(i, a, b) for i, (a, b) in enumerate(zip(lists, informer, strict=True)) if a != b]
    assert differ == [], differ[:1]


@pytest.mark.parametrize(("scenario", "withheld"), [
    ("exit3-never", True), ("exit3", True), ("oom", True), ("preempted", False)])
def test_a_trainjobs_failed_before_its_pods_end_never_commits_another_cause(
    path: Path_, scenario: str, withheld: bool
) -> None:
    # M11: the TrainJob's Failed reaches its watch before the pod's end reaches the pods'. A
    # look that has not seen the evidence is left out (incomplete), not committed as unknown;
    # once the evidence is in, the cause is the one read in the recorded order.
    recorded_order = replay(scenario, path)[-1]
    readings = replay(scenario, path, pods_lag=True)
    final = readings[-1]
    assert recorded_order is not None and final is not None
    assert (final.state, final.cause.kind) == (recorded_order.state, recorded_order.cause.kind)
    failed = [r.cause.kind for r in readings if r is not None and r.state is State.FAILED]
    assert failed and set(failed) == {final.cause.kind}, kinds(readings)
    ended = [r is not None and r.state is State.FAILED for r in readings].index(True)
    # before the evidence, a look was left out, or read the pods it still saw running as the
    # run's pods not yet gone (issue 46): never the failure without its cause
    waited = [r is None or "not yet gone" in r.cause.note for r in readings[:ended]]
    assert any(waited) is withheld, kinds(readings)


def test_a_real_preemption_is_preempted_and_the_rule_for_it_is_not_the_failure_budget(
    path: Path_,
) -> None:
    # The scheduler evicts dispatch's low-priority pod for a person's high-priority Job
    # (DisruptionTarget, PreemptionByScheduler); the pod's exit 143 is not the cause.
    readings = replay("preempted", path)
    seen = kinds(readings)
    final = readings[-1]
    assert final is not None and seen[-1] == (State.FAILED, CauseKind.PREEMPTED), seen
    assert "reason=PreemptionByScheduler" in final.cause.detail, final.cause
    assert "PreemptionByScheduler" in json.dumps([ln["object"] for ln in recorded("preempted")
                                                  if ln["kind"] == "Pod"])
    never = {CauseKind.NODE_LOST, CauseKind.UNKNOWN, CauseKind.NON_ZERO_EXIT}
    assert not [k for k in seen if k is not None and k[1] in never], seen
    never_pending_once_running(seen)
    # S9: the recorder's policy (a resubmit rule for preemption, another with its own budget
    # for non-zero exits) spends the preemption rule; dispatch resubmitted once.
    policy = msgspec.convert(RESUBMIT, RecoveryPolicy)
    found = policy.rule_for(final.cause.kind)
    assert found is not None and CauseKind.NON_ZERO_EXIT not in found[1].on
    assert len(trainjobs_added("preempted")) == 2


def test_a_person_deleting_the_trainjob_reads_cancelled_by_someone_else(path: Path_) -> None:
    readings = replay("deleted", path)
    seen = kinds(readings)
    final = readings[-1]
    assert final is not None and seen[-1] == (State.CANCELLED, CauseKind.CANCELLED), seen
    assert final.cause.actor != "dispatch", final.cause
    assert final.cause.provenance is Provenance.ACTOR
    assert "deleted by someone other than dispatch" in final.cause.note
    assert (State.RUNNING, CauseKind.NONE) in seen
    never = {CauseKind.NODE_LOST, CauseKind.UNKNOWN, CauseKind.NON_ZERO_EXIT, CauseKind.PREEMPTED}
    assert not [k for k in seen if k is not None and k[1] in never], seen
    assert len(trainjobs_added("deleted")) == 1  # S14: never resubmitted


def test_an_image_pull_error_is_launch_failed_with_the_kubelets_words(path: Path_) -> None:
    readings = replay("image-pull", path)
    seen = kinds(readings)
    failing = [r for r in readings if r is not None and r.cause.kind is CauseKind.LAUNCH_FAILED]
    assert failing and all(r.state is State.PENDING for r in failing), seen
    assert "ErrImagePull" in failing[0].cause.detail
    # It never ran: no reading before dispatch's cancel says anything but pending.
    live = before_the_stop("image-pull", readings)
    assert live and all(r is not None and r.state is State.PENDING for r in live), seen
    assert seen[-1] == (State.CANCELLED, CauseKind.CANCELLED), seen


def before_the_stop(
    scenario: str, readings: list[ObjectReport | None]
) -> list[ObjectReport | None]:
    """The readings before dispatch's first TrainJob was being deleted (a cancel's or a
    resubmission's stop: after it, pods left alive read running until they are gone, S11)."""
    lines = recorded(scenario)
    first = next(i for i, ln in enumerate(lines)
                 if ln["kind"] == "TrainJob" and ln["type"] == "ADDED")
    name = lines[first]["object"]["metadata"]["name"]
    count = 0
    for ln in lines[first:]:
        if ln["type"] == "LISTED":
            continue
        obj = ln["object"]
        if ln["kind"] == "TrainJob" and obj["metadata"]["name"] == name and (
                ln["type"] == "DELETED" or obj["metadata"].get("deletionTimestamp")):
            return readings[:count]
        count += 1
    return readings


def test_more_nodes_than_the_cluster_has_is_pending_with_the_schedulers_words(path: Path_) -> None:
    # 5 whole-node pods on 4 nodes: four run, the fifth is Unschedulable and holds the gang.
    readings = replay("unschedulable", path)
    live = before_the_stop("unschedulable", readings)
    waiting = [r for r in live if r is not None and "Unschedulable" in r.cause.detail]
    assert waiting and all(r.state is State.PENDING for r in waiting), kinds(live)
    assert waiting[-1].cause.kind is CauseKind.NO_CAPACITY, waiting[-1].cause
    assert "Insufficient cpu" in waiting[-1].cause.detail, waiting[-1].cause.detail
    assert not [r for r in live if r is not None and r.state is not State.PENDING], kinds(live)
    assert kinds(readings)[-1] == (State.CANCELLED, CauseKind.CANCELLED)


def first_pods(scenario: str) -> set[str]:
    """The pods of dispatch's first TrainJob (its JobSet has the TrainJob's name)."""
    tj = trainjobs_added(scenario)[0]["object"]["metadata"]["name"]
    return {ln["object"]["metadata"]["name"] for ln in recorded(scenario)
            if ln["kind"] == "Pod" and ln["object"]["metadata"]["name"].startswith(f"{tj}-")}


def test_a_lost_node_is_node_lost_in_the_window_then_the_replacement_waits_for_its_pods(
    path: Path_,
) -> None:
    # lose-node: Ready Unknown, the unreachable taint, taint eviction after 20 s, the pod
    # Terminating with no kubelet; the recorder's window is 30 s, then dispatch stops and
    # resubmits behind a closed gate; the node comes back, the old pod ends, the gate opens.
    readings = replay("node-lost", path)
    live = before_the_stop("node-lost", readings)
    seen = kinds(live)
    lost = [r for r in live if r is not None and r.cause.kind is CauseKind.NODE_LOST]
    assert lost and all(r.state is State.RUNNING and r.lost_since is not None for r in lost), seen
    assert all(r.lost_since == lost[0].lost_since for r in lost)
    # once lost, lost until dispatch's stop (the Job's own replacement pod does not clear it)
    assert seen[seen.index((State.RUNNING, CauseKind.NODE_LOST)):] == [
        (State.RUNNING, CauseKind.NODE_LOST)] * len(lost), seen
    assert "DeletionByTaintManager" in lost[-1].cause.detail
    never = {CauseKind.UNKNOWN, CauseKind.NON_ZERO_EXIT, CauseKind.PREEMPTED}
    assert not [k for k in kinds(readings) if k is not None and k[1] in never], kinds(readings)
    # After the stop the old pods keep it alive (S11) until they are gone.
    stopped = [r.state for r in readings[len(live):] if r is not None]
    end = stopped.index(State.CANCELLED)
    assert end > 0 and set(stopped[:end]) == {State.RUNNING}, stopped
    assert set(stopped[end:]) == {State.CANCELLED}, stopped
    # Gone without a deleting look: the backend names no actor, and the core reads it as its
    # recorded stop's effect (docs/kubeflow.md).
    final = readings[-1]
    assert final is not None and final.cause.actor is None, final.cause
    # S11 on the real chain: the replacement is made gated and its gate opens only once every
    # pod of the first TrainJob is gone.
    lines = recorded("node-lost")
    second = trainjobs_added("node-lost")[1]
    assert second["object"]["spec"]["suspend"] is True
    name = second["object"]["metadata"]["name"]
    opened = next(ln["seq"] for ln in lines if ln["kind"] == "TrainJob" and ln["type"] == "MODIFIED"
                  and ln["object"]["metadata"]["name"] == name
                  and ln["object"]["spec"].get("suspend") is False)
    old = first_pods("node-lost")
    gone = [ln["seq"] for ln in lines if ln["kind"] == "Pod" and ln["type"] == "DELETED"
            and ln["object"]["metadata"]["name"] in old]
    assert len(gone) == len(old) >= 2 and max(gone) < opened, (old, gone, opened)


def test_a_replacement_behind_our_gate_is_ours_until_it_opens_then_never_someones_hold(
    path: Path_,
) -> None:
    # The gate opens (spec.suspend false) a moment before Trainer turns Suspended False: that
    # moment is a resume in progress, not a hold of someone else's.
    readings = replay("node-lost", path, nth=1)
    held = [r for r in readings if r is not None and r.state is State.HELD]
    assert held and all(r.cause.actor == "dispatch" and r.gated for r in held), held
    seen = kinds(readings)
    after = seen[seen.index((State.HELD, CauseKind.HELD)):]
    opened = after.index(next(k for k in after if k != (State.HELD, CauseKind.HELD)))
    assert after[opened] == (State.PENDING, CauseKind.RELEASED), after
    assert (State.HELD, CauseKind.HELD) not in after[opened:], after
    assert (State.RUNNING, CauseKind.NONE) in after[opened:], after


def test_a_node_back_inside_the_window_reads_node_lost_then_running_and_succeeds(
    path: Path_,
) -> None:
    # The node's Ready goes Unknown and it is tainted unreachable, then KWOK renews its lease
    # again before the 20 s toleration: nothing is evicted, one execution, succeeded.
    readings = replay("node-flap", path)
    seen = kinds(readings)
    assert seen[-1] == (State.SUCCEEDED, CauseKind.NONE), seen
    lost = seen.index((State.RUNNING, CauseKind.NODE_LOST))
    back = seen.index((State.RUNNING, CauseKind.NONE), lost)
    assert set(seen[lost:back]) == {(State.RUNNING, CauseKind.NODE_LOST)}, seen
    assert {k for k in seen[back:] if k is not None} <= {
        (State.RUNNING, CauseKind.NONE), (State.SUCCEEDED, CauseKind.NONE)}, seen
    final = readings[-1]
    assert final is not None and len(final.executions) == 1 and final.lost_since is None
    assert "DisruptionTarget" not in json.dumps(recorded("node-flap"))
    assert len(trainjobs_added("node-flap")) == 1
