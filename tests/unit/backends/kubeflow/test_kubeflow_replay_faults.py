"""The informer's recovery from faults of the real API server, replayed (tests/fixtures/
k8s-recorded/fault-*.jsonl, recorded by tests/integration/k8s/record_faults.py: dispatch's own
informer, each request it made answered by the real kube-apiserver v1.36.3 while a job ran to
success).

``fault-apiserver``: kube-apiserver restarted mid-watch: every stream breaks ("incomplete
chunked read"); the informer re-LISTs, and the restarted server first answers ``403
Forbidden`` (its authorizer not ready yet: the collections are *refused* for a moment), then
the lists. ``fault-compact``: etcd compacted past every version the watches hold and the API
server restarted on it; each resumed watch is answered the real ``410 Expired`` Status ("too
old resource version: 1361 (1381)"; the Warning Events' watch, not served from the watch
cache, etcd's words), and the informer re-LISTs.

Here the informer's real Reflector threads make their requests to a fake client, and each
request gets the recorded answer, in the recorded order: a LIST its recorded items and
resourceVersion (or its recorded failure), a WATCH a real ``WatchStream`` over a fake response
fed the recorded lines one by one, ending where the recording's ``ENDED`` says (cleanly, or
broken as the real one broke), a recorded ``ERROR`` line verbatim. The replay is lock-step: each
line is given only when the collection's reflector waits for it, and the next line only once
it waits again, so each look sees exactly what was received before it. A request of another
kind than the recording's next (a WATCH where the informer had LISTed) fails the test."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx2
import msgspec
import pytest
from test_kubeflow_replay import RECORDED, RESUBMIT, Replayed, recorded
from tests.strategies_core import KUBEFLOW, Sim

from dispatch.backends.kubeflow import KubeflowBackend
from dispatch.backends.kubeflow.client import (
    BACKEND,
    ApiAnswer,
    Objects,
    ResourceType,
    WatchExpired,
    WatchStream,
)
from dispatch.backends.kubeflow.informer import InformerSettings
from dispatch.backends.kubeflow.look import NODES, collections_of, events_of
from dispatch.backends.kubeflow.objects import TOKEN_LABEL
from dispatch.core.decisions import Commit, Decision
from dispatch.core.model import ObjectReport, SchedulerUnreachable, State, parse_token
from dispatch.core.policy import RecoveryPolicy

FAULTS = sorted(p.stem for p in RECORDED.glob("fault-*.jsonl"))
REQUESTS = ("LIST", "WATCH", "FAILED")
UNREACHABLE = "unreachable"  # a look that raised SchedulerUnreachable (R3)
Reading = ObjectReport | None | str


class FaultWire:
    """A watch's HTTP response: the recorded lines, given one at a time by the replay; None
    ends it cleanly, an exception breaks it. ``idle``: its reader waits for the next line."""

    def __init__(self, api: FaultReplayed) -> None:
        self.api = api
        self.lines: deque[str | Exception | None] = deque()
        self.idle = False
        self.extensions = {"network_stream": self}

    def iter_lines(self) -> Iterator[str]:
        cv = self.api.cv
        while True:
            with cv:
                while not self.lines:
                    self.idle = True
                    cv.notify_all()
                    cv.wait()
                self.idle = False
                line = self.lines.popleft()
            if line is None:
                return
            if isinstance(line, Exception):
                raise line
            yield line

    def get_extra_info(self, what: str) -> FaultWire:
        return self

    def shutdown(self, how: int) -> None:  # abort(): ends the stream as a socket's shutdown
        with self.api.cv:
            self.lines.append(None)
            self.api.cv.notify_all()

    def close(self) -> None:
        return None


class FaultReplayed(Replayed):
    """The recorded answers, per collection (its kind: one namespace), in order."""

    def __init__(self) -> None:
        super().__init__()
        self.cv = threading.Condition()
        self.answers: dict[str, deque[dict[str, Any]]] = {}
        self.asking: dict[str, bool] = {}  # the kind's reflector waits for an answer
        self.wire: dict[str, FaultWire | None] = {}
        self.watched_from: dict[str, list[str]] = {}  # the versions each WATCH asked from
        self.mismatches: list[str] = []
        self.closing = False
        self.read_at: list[int] = []  # the recorded line (seq) after which each look was made

    def _answer(self, kind: str, request: str) -> dict[str, Any]:
        with self.cv:
            queue = self.answers.setdefault(kind, deque())
            while not queue:
                if self.closing:
                    raise SchedulerUnreachable(BACKEND, "the replay is over")
                self.asking[kind] = True
                self.cv.notify_all()
                self.cv.wait()
            self.asking[kind] = False
            answer = queue.popleft()
            said = answer["object"].get("request", answer["type"])
            if said != request:
                self.mismatches.append(f"{kind}: asked {request}, recorded {answer['seq']}")
                raise SchedulerUnreachable(BACKEND, "not the recorded request")
            self.wire[kind] = None
            return answer

    @staticmethod
    def _failed(answer: dict[str, Any]) -> Exception:
        said = answer["object"]
        if said["raised"] == "ApiAnswer":
            return ApiAnswer(said["code"], said["reason"], said["message"])
        if said["raised"] == "WatchExpired":
            return WatchExpired(said["error"])
        return SchedulerUnreachable(BACKEND, said["error"])

    def list_versioned(
        self, res: ResourceType, namespace: str | None, labels: Any, fields: Any = None,
        keep: Any = None,
    ) -> tuple[Objects, str]:
        self.requests.append("LIST")
        answer = self._answer(res._api_info.resource.kind, "LIST")
        if answer["type"] == "FAILED":
            raise self._failed(answer)
        items = json.loads(json.dumps(answer["items"]))  # as on the wire
        return ([keep(o) for o in items] if keep is not None else items,
                answer["object"]["metadata"]["resourceVersion"])

    def open_watch(
        self, res: ResourceType, namespace: str | None, labels: Any, resource_version: str,
        server_timeout_s: int, fields: Any = None,
    ) -> WatchStream:
        self.requests.append("WATCH")
        kind = res._api_info.resource.kind
        self.watched_from.setdefault(kind, []).append(resource_version)
        answer = self._answer(kind, "WATCH")
        if answer["type"] == "FAILED":
            raise self._failed(answer)
        wire = FaultWire(self)
        with self.cv:
            self.wire[kind] = wire
        return WatchStream(wire, f"watch {kind} in {namespace}")

    def give(self, line: dict[str, Any]) -> None:
        """The recorded line to its collection's reflector: the answer to its next request,
        or the next line of its open watch; returns once the reflector waits again."""
        kind = line["kind"]
        with self.cv:
            if line["type"] in REQUESTS:
                self.answers.setdefault(kind, deque()).append(line)
            else:
                wire = self.wire.get(kind)
                assert wire is not None, f"no watch open for line {line['seq']}"
                if line["type"] != "ENDED":
                    wire.lines.append(json.dumps({"type": line["type"],
                                                  "object": line["object"]}))
                elif line["object"]["how"] == "closed":
                    wire.lines.append(None)
                else:
                    wire.lines.append(httpx2.RemoteProtocolError(line["object"]["error"]))
            self.cv.notify_all()
            assert self.cv.wait_for(lambda: self._waits(kind), timeout=30), (
                f"{kind}: never asked for what followed line {line['seq']}")

    def _waits(self, kind: str) -> bool:
        wire = self.wire.get(kind)
        ready = self.asking.get(kind, False) or (
            wire is not None and wire.idle and not wire.lines)
        return ready and not self.answers.get(kind)

    def end(self) -> None:
        with self.cv:
            self.closing = True
            for wire in self.wire.values():
                if wire is not None:
                    wire.lines.append(None)
            self.cv.notify_all()


def with_items(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recording's lines, each LIST carrying the LISTED lines after it as its items."""
    out: list[dict[str, Any]] = []
    for line in lines:
        if line["type"] == "LISTED":
            assert out[-1]["type"] == "LIST" and out[-1]["kind"] == line["kind"]
            out[-1]["items"].append(line["object"])
        elif line["type"] == "LIST":
            out.append(dict(line, items=[]))
        else:
            out.append(line)
    return out


def replay_fault(
    fault: str, stale_after_s: float = InformerSettings.stale_after_s
) -> tuple[list[Reading], FaultReplayed]:
    """What discover() reported of the recording's TrainJob after each line from its creation
    on (None: left out of an incomplete look; UNREACHABLE: the look raised), and the fake API
    server (its requests)."""
    lines = with_items(recorded(fault))
    (added,) = [ln["object"] for ln in lines if ln["kind"] == "TrainJob" and ln["type"] == "ADDED"]
    ns = added["metadata"]["namespace"]
    ref = f"{ns}/{added['metadata']['name']}"
    token = added["metadata"]["labels"][TOKEN_LABEL]
    api = FaultReplayed()
    now: list[datetime] = [datetime.fromisoformat(lines[0]["at"])]
    backend = KubeflowBackend(
        client=api,  # type: ignore[arg-type]
        namespaces=[ns],
        clock=lambda: now[-1],
        informer_settings=InformerSettings(
            stale_after_s=stale_after_s, backoff_s=0.001, max_backoff_s=0.01),
    )
    informer = backend.informer
    assert informer is not None
    for w in [*collections_of(ns), events_of(ns), NODES]:
        informer.reflector(w)  # as discover()'s first look would: each asks for its LIST
    readings: list[Reading] = []
    seen = False
    try:
        for line in lines:
            api.give(line)
            seen = seen or line["object"] is added
            if not seen:
                continue
            now.append(datetime.fromisoformat(line["at"]))
            api.read_at.append(line["seq"])
            try:
                found = backend.discover([token], [ref])
            except SchedulerUnreachable:
                readings.append(UNREACHABLE)
                continue
            (report,) = [o for o in found.objects if o.ref == ref] or (None,)
            assert report is not None or not found.complete, (line["seq"], found)
            readings.append(report)
        # at the end every collection is on an open watch: no request the recording lacks
        assert [kind for kind, asks in api.asking.items() if asks] == []
    finally:
        informer.stopping.set()  # no request after the recording's last line
        api.end()
        backend.close()
    assert api.mismatches == []
    return readings, api


def states(readings: list[Reading]) -> list[State | None | str]:
    return [r.state if isinstance(r, ObjectReport) else r for r in readings]


def recorded_requests(fault: str, kind: str | None = None) -> dict[str, int]:
    lines = [ln for ln in recorded(fault) if kind is None or ln["kind"] == kind]
    asked = [ln["object"].get("request", ln["type"]) for ln in lines if ln["type"] in REQUESTS]
    return {r: asked.count(r) for r in ("LIST", "WATCH")}


@pytest.mark.parametrize("stale_after_s", [InformerSettings.stale_after_s, 0.0])
@pytest.mark.parametrize("fault", FAULTS)
def test_through_a_fault_no_look_reads_an_end_and_the_end_is_succeeded_once(
    fault: str, stale_after_s: float
) -> None:
    # S16: during and after the fault every look is the running job, an incomplete look
    # (None) or one that raised (the cache stale past stale_after_s: 0 here makes every look
    # while a watch is broken raise) -- never an ended job; then succeeded, once.
    readings, _ = replay_fault(fault, stale_after_s)
    seen = states(readings)
    assert seen[-1] is State.SUCCEEDED, seen
    first = seen.index(State.SUCCEEDED)
    assert set(seen[:first]) <= {State.PENDING, State.RUNNING, None, UNREACHABLE}, seen
    ends = readings[first:]
    assert all(isinstance(r, ObjectReport) and r.state is State.SUCCEEDED for r in ends), seen
    final = readings[-1]
    assert isinstance(final, ObjectReport)
    assert {(r.state, r.cause.kind, r.executions[-1].ended_at) for r in ends  # type: ignore[union-attr]
            } == {(final.state, final.cause.kind, final.executions[-1].ended_at)}
    assert len(final.executions) == 1, final  # one execution: nothing restarted or resubmitted


@pytest.mark.parametrize("stale_after_s", [InformerSettings.stale_after_s, 0.0])
@pytest.mark.parametrize("fault", FAULTS)
def test_the_core_fed_every_look_through_a_fault_submits_once_and_commits_once(
    fault: str, stale_after_s: float
) -> None:
    # The looks as the supervisor's ticks (decide -> events, tests/strategies_core.Sim, the
    # recorder's policy): an incomplete look is a Discovery with complete=False, a look that
    # raised none at all. One submission, its object bound, one end recorded and committed
    # succeeded: no recovery, no resubmission, nothing committed twice.
    readings, api = replay_fault(fault, stale_after_s)
    at = {ln["seq"]: datetime.fromisoformat(ln["at"]) for ln in recorded(fault)}
    token = next(r.token for r in readings if isinstance(r, ObjectReport))
    sim = Sim(msgspec.convert(RESUBMIT, RecoveryPolicy).rules, declarations=KUBEFLOW,
              job_id=parse_token(token)[0], at=at[api.read_at[0]])
    decided: list[Decision] = [*sim.tick([])]
    for r, seq in zip(readings, api.read_at, strict=True):
        if r == UNREACHABLE:
            decided += sim.tick(None, at=at[seq])
        elif r is None:
            decided += sim.tick([], at=at[seq], complete=False)
        else:
            assert isinstance(r, ObjectReport)
            decided += sim.tick([r], at=at[seq])
    assert [type(d).__name__ for d in decided] == ["Submit", "Bind", "RecordEnd", "Commit"]
    (commit,) = [d for d in decided if isinstance(d, Commit)]
    assert commit.state is State.SUCCEEDED, commit


@pytest.mark.parametrize("fault", FAULTS)
def test_the_informer_makes_the_recorded_requests_and_resumes_where_recorded(fault: str) -> None:
    _, api = replay_fault(fault)
    # every LIST and WATCH the informer made on the real server, no more, no fewer
    asked = {r: api.requests.count(r) for r in ("LIST", "WATCH")}
    assert "list" not in api.requests and asked == recorded_requests(fault), asked
    # each WATCH from the version recorded (the list's, or the last event's or bookmark's)
    lines = recorded(fault)
    for kind in {ln["kind"] for ln in lines}:
        versions = [ln["object"]["metadata"]["resourceVersion"] for ln in lines
                    if ln["kind"] == kind and (ln["type"] == "WATCH" or (
                        ln["type"] == "FAILED" and ln["object"]["request"] == "WATCH"))]
        assert api.watched_from[kind] == versions, kind


def test_a_restarted_api_server_breaks_every_watch_and_the_informer_relists_past_its_403s(
) -> None:
    lines = recorded("fault-apiserver")
    broken = [ln for ln in lines if ln["type"] == "ENDED"]
    assert len(broken) == 6 and {ln["object"]["how"] for ln in broken} == {"broken"}
    refused = [ln["object"] for ln in lines if ln["type"] == "FAILED"]
    assert refused and {(o["request"], o["code"]) for o in refused} == {("LIST", 403)}
    # per collection: the first LIST and WATCH, the refused LISTs, one re-LIST that got
    # through and its WATCH; no WATCH resumed from before the break
    for kind in {ln["kind"] for ln in broken}:
        failures = sum(ln["kind"] == kind for ln in lines if ln["type"] == "FAILED")
        assert recorded_requests("fault-apiserver", kind) == {"LIST": 2 + failures, "WATCH": 2}
    readings, api = replay_fault("fault-apiserver")
    assert api.requests.count("LIST") == 12 + len(refused)
    seen = states(readings)
    # refused for a moment: an incomplete look (None), never the job gone
    assert None in seen and State.RUNNING in seen[seen.index(None):], seen
    stale = states(replay_fault("fault-apiserver", 0.0)[0])
    assert UNREACHABLE in stale, stale


def test_a_watch_resumed_on_a_compacted_store_gets_410_and_the_informer_relists_once() -> None:
    lines = recorded("fault-compact")
    expired = [ln for ln in lines if ln["type"] == "ERROR"]
    assert len(expired) == 6 and {ln["object"]["code"] for ln in expired} == {410}
    assert {ln["object"]["reason"] for ln in expired} == {"Expired"}
    # per collection: the first LIST and one re-LIST after the 410, nothing else
    for kind in {ln["kind"] for ln in expired}:
        assert recorded_requests("fault-compact", kind)["LIST"] == 2, kind
    # the watch that got the 410 asked from the version the informer held before the fault
    resumed = {ln["kind"]: [w for w in lines[:ln["seq"] - 1] if w["kind"] == ln["kind"]][-1]
               for ln in expired}
    assert {w["type"] for w in resumed.values()} == {"WATCH"}
    held = {kind: [e for e in lines[:w["seq"]] if e["kind"] == kind and e["type"] in (
        "LIST", "ADDED", "MODIFIED", "DELETED", "BOOKMARK")][-1] for kind, w in resumed.items()}
    for kind, w in resumed.items():  # the last version that collection's watch had seen
        rv = w["object"]["metadata"]["resourceVersion"]
        assert rv == held[kind]["object"]["metadata"]["resourceVersion"], kind
    readings, api = replay_fault("fault-compact")
    assert api.requests.count("LIST") == 12
    for kind, w in resumed.items():
        assert w["object"]["metadata"]["resourceVersion"] in api.watched_from[kind], kind
    assert states(readings)[-1] is State.SUCCEEDED


def test_a_job_that_ends_while_the_informer_is_cut_off_is_read_succeeded_from_its_relist(
) -> None:
    # The API server restarts and the informer's re-LISTs reach it only once the job has
    # succeeded: no watch event says so, the re-LIST's items do (the TrainJob Complete, the
    # pod Succeeded). Until then every look reads it running (or raises, stale), never ended.
    lines = recorded("fault-apiserver-end")
    relist = next(ln["seq"] for ln in lines if ln["type"] == "LIST" and ln["seq"] > 16)
    events = [ln for ln in lines if ln["type"] in ("ADDED", "MODIFIED", "DELETED")]
    assert all(ln["seq"] < relist for ln in events)  # nothing came on a watch after the break
    complete = [ln for ln in lines if ln["kind"] == "TrainJob" and ln["type"] == "LISTED"
                and ln["seq"] > relist]
    assert complete and "Complete" in json.dumps(complete[0]["object"]["status"])
    tj_relist = complete[0]["seq"] - 1  # the TrainJob's re-LIST, its one item after it
    assert lines[tj_relist - 1]["type"] == "LIST"
    for stale_after_s in (InformerSettings.stale_after_s, 0.0):
        readings, api = replay_fault("fault-apiserver-end", stale_after_s)
        seen = states(readings)
        assert seen[-1] is State.SUCCEEDED, seen
        before = [s for s, seq in zip(seen, api.read_at, strict=True) if seq < tj_relist]
        assert before and State.SUCCEEDED not in before, seen
        assert set(before) <= {State.PENDING, State.RUNNING, UNREACHABLE}, seen
        assert api.requests.count("LIST") == 12 and api.requests.count("WATCH") == 12
