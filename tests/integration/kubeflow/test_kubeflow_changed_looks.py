"""Issue 49: a kubeflow look after the first maps again only the TrainJobs whose objects changed
(backends/kubeflow/changes.py), and answers exactly what a look that maps every TrainJob
answers. Two backends watch the same stand-in API server: one keeps its reports between looks,
the other forgets them before each look (every TrainJob mapped, today's path). Over seeded
random sequences of controller writes, deletions, lost nodes, Warning Events, clock steps, cut
watches and compactions (a re-LIST), each look of the two must be equal, and each look's
``Discovery.changes`` must name every job whose report differs from the previous look's: what
a supervisor needs to decide on changed-only looks exactly what it decides on full ones
(supervise/quiet.py). And two supervisors, one on each kind of backend, must record the same
decisions for the same staged history."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path

import pytest
from kubeflow_support import Clock, SettledBackend, make_backend
from test_kubeflow_scenarios import NODES, submit
from tests.specs import parse_spec

from dispatch.backends.kubeflow import KubeflowBackend
from dispatch.backends.kubeflow.events import TRAINJOB_CREATION_FAILED
from dispatch.backends.kubeflow.informer import InformerSettings
from dispatch.core.model import Discovery, ObjectReport
from dispatch.core.record import fold
from dispatch.service.requests import create_job
from dispatch.stores.base import RecordStore
from dispatch.stores.select import open_store
from dispatch.supervise.loop import Supervisor
from kube_fake import FakeApiServer
from kube_fake import trainer as tr


def full_look(backend: KubeflowBackend, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
    """The reference: every TrainJob mapped again (no report kept from a previous look)."""
    backend._reports.kept.clear()
    return backend.discover(tokens, refs)


def by_ref(discovery: Discovery) -> dict[str, ObjectReport]:
    return {o.ref: o for o in discovery.objects}


class Stage:
    """The test plays Trainer, JobSet, the kubelet, the node controller and a person."""

    def __init__(self, fake: FakeApiServer, backend: KubeflowBackend, clock: Clock,
                 rng: random.Random) -> None:
        self.fake, self.backend, self.clock, self.rng = fake, backend, clock, rng
        self.jobs: list[tuple[str, str, str]] = []  # token, namespace, name
        self.pods: dict[str, list[str]] = {}  # name -> its pods, once materialized

    def step(self) -> str:
        rng, fake = self.rng, self.fake
        alive = [j for j in self.jobs if fake.get("TrainJob", j[1], j[2]) is not None]
        # weighted so that jobs live long enough to meet lost nodes, events and clock steps
        weights = {"submit": 2, "clock": 2, "steady": 1, "node_lost": 2, "node_back": 2,
                   "node_gone": 0.7, "drop_watches": 0.5, "compact": 0.5}
        if alive:
            weights.update(materialize=4, open=2, event=1, delete=0.4, fail=0.5, succeed=0.4)
        if any(self.pods.get(j[2]) for j in alive):
            weights.update(terminate=2, pod_gone=1, disrupt=1)
        what = rng.choices(list(weights), list(weights.values()))[0]
        token, ns, name = rng.choice(alive) if alive else ("", "", "")
        pods = [p for p in self.pods.get(name, []) if fake.get("Pod", ns, p) is not None]
        if what == "submit":
            self.jobs.append(submit(self.backend, f"job-{len(self.jobs)}",
                                    gated=rng.random() < 0.3))
        elif what == "clock":
            self.clock.now += timedelta(seconds=rng.choice([1, 5, 11, 400]))
        elif what == "materialize" and name not in self.pods:
            self.pods[name] = tr.materialize(fake, ns, name, NODES,
                                             phase=rng.choice(["Running", "Pending"]))
        elif what == "open":
            fake.update("TrainJob", ns, name, {"spec": {"suspend": False}})
        elif what == "event":
            about = fake.get("TrainJob", ns, name) or {}  # read while it has no JobSet (M5)
            fake.put(tr.event(ns, about, TRAINJOB_CREATION_FAILED,
                              f"quota exceeded {rng.random()}", count=rng.randint(1, 5)))
        elif what == "delete":
            fake.remove("TrainJob", ns, name)
        elif what == "fail":
            failed = tr.cond("Failed", reason="FailedJobs", message="jobset failed", at=tr.T2)
            tr.set_conditions(fake, "JobSet", ns, name, failed) if fake.get(
                "JobSet", ns, name) else None
            tr.set_conditions(fake, "TrainJob", ns, name, failed)
        elif what == "succeed":
            tr.set_conditions(fake, "TrainJob", ns, name,
                              tr.cond("Complete", reason="JobsCompleted", message="done",
                                      at=tr.T2))
        elif what == "terminate" and (ran := [p for p in pods if (fake.get("Pod", ns, p) or {})
                                              .get("status", {}).get("containerStatuses")]):
            tr.terminate(fake, ns, rng.choice(ran), reason=rng.choice(["Error", "OOMKilled"]),
                         exit_code=rng.choice([1, 137]), at=tr.T2)
        elif what == "pod_gone" and pods:
            fake.remove("Pod", ns, rng.choice(pods))
        elif what == "disrupt" and pods:
            tr.add_pod_condition(fake, ns, rng.choice(pods), tr.builtin_cond(
                "DisruptionTarget", "True", "DeletionByTaintManager", "node lost", tr.T2))
        elif what == "node_lost":
            node = tr.node(rng.choice(NODES), lost=True, since=tr.T2)
            if rng.random() < 0.5:  # no time given: the window starts at the look's now
                for t in node["spec"]["taints"]:
                    del t["timeAdded"]
                del node["status"]["conditions"][0]["lastTransitionTime"]
            fake.put(node)
        elif what == "node_back":
            fake.put(tr.node(rng.choice(NODES)))
        elif what == "node_gone" and fake.get("Node", "", node_name := rng.choice(NODES)):
            fake.remove("Node", "", node_name)
        elif what == "drop_watches":
            fake.drop_watches()
        elif what == "compact":
            fake.compact()
        return what

    def wanted(self) -> tuple[list[str], list[str]]:
        return [t for t, _, _ in self.jobs], [f"{ns}/{name}" for _, ns, name in self.jobs]


@pytest.mark.parametrize("seed", range(8))
def test_changed_looks_answer_what_full_looks_answer(
        fake: FakeApiServer, tmp_path: Path, clock: Clock, seed: int) -> None:
    for n in NODES:
        fake.put(tr.node(n))
    for d in ("changed", "full"):
        (tmp_path / d).mkdir()
    changed = make_backend(fake, tmp_path / "changed", clock)
    full = make_backend(fake, tmp_path / "full", clock)
    stage = Stage(fake, changed, clock, random.Random(seed))
    previous: Discovery | None = None
    try:
        for i in range(60):
            what = stage.step()
            tokens, refs = stage.wanted()
            got = changed.discover(tokens, refs)
            want = full_look(full, tokens, refs)
            where = f"seed {seed}, step {i} ({what})"
            assert by_ref(got) == by_ref(want), where
            assert got.complete == want.complete, where
            if previous is None:
                assert got.changes is None, where  # the first look cannot tell
            else:
                assert got.changes is not None, where
                assert previous.changes is None or got.changes.since == previous.changes.look
                before, now = by_ref(previous), by_ref(got)
                differ = {r for r in before.keys() | now.keys() if before.get(r) != now.get(r)}
                assert differ <= got.changes.keys, (where, differ - got.changes.keys)
            previous = got
    finally:
        changed.close()
        full.close()


def test_a_steady_look_maps_no_trainjob_and_a_change_maps_only_its_own(
        fake: FakeApiServer, tmp_path: Path, clock: Clock) -> None:
    for n in NODES:
        fake.put(tr.node(n))
    backend = make_backend(fake, tmp_path, clock)
    try:
        jobs = [submit(backend, f"job-{i}") for i in range(4)]
        pods = {name: tr.materialize(fake, ns, name, NODES) for _, ns, name in jobs}
        tokens = [t for t, _, _ in jobs]
        backend.discover(tokens, [])
        backend.discover(tokens, [])
        mapped = backend._reports.mapped
        steady = backend.discover(tokens, [])
        assert backend._reports.mapped == mapped  # nothing changed: nothing mapped
        assert steady.changes is not None and steady.changes.keys == frozenset()
        assert len(steady.objects) == 4
        token, ns, name = jobs[2]
        for pod in pods[name]:  # its pods end: its report changes (the end not said yet)
            tr.terminate(fake, ns, pod, reason="Error", exit_code=1, at=tr.T2)
        after = backend.discover(tokens, [])
        assert backend._reports.mapped == mapped + 1  # its pod changed: it alone is mapped
        assert after.changes is not None
        assert after.changes.keys == frozenset({token, f"{ns}/{name}"})
        fake.put(tr.node(NODES[0], lost=True, since=tr.T2))  # a node: every job may hang off it
        backend.discover(tokens, [])
        assert backend._reports.mapped == mapped + 1 + 4
    finally:
        backend.close()


class EveryJobMapped(SettledBackend):
    """Today's path: no change reported, every TrainJob mapped at every look."""

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        self._reports.kept.clear()
        return super().discover(tokens, refs)


def _events_of(store: RecordStore, job_id: str) -> list[tuple[str, str, str]]:
    """A job's record as the decisions it holds: each event's type and, for a state, which."""
    out = []
    for e in store.read(job_id):
        name = type(e).__struct_config__.tag
        cause = getattr(e, "cause", None)
        out.append((str(name), str(getattr(e, "state", "") or ""),
                    str(cause.kind if cause is not None else "")))
    return out


def _serving(backend: KubeflowBackend) -> Callable[[str], KubeflowBackend]:
    return lambda _name: backend


@pytest.mark.parametrize("seed", range(3))
def test_a_supervisor_on_changed_looks_decides_what_one_on_full_looks_decides(
        fake: FakeApiServer, tmp_path: Path, clock: Clock, seed: int) -> None:
    """Two supervisors, each with its own record and backend on the one stand-in: one whose
    backend reports changes (quiet jobs skipped without comparing their objects), one whose
    backend maps every TrainJob and reports none. The test plays the controllers on the pair
    of TrainJobs of each job alike; every job's record must hold the same decisions."""
    for n in NODES:
        fake.put(tr.node(n))
    rng = random.Random(seed)
    spec = parse_spec({"name": "pair", "command": ["torchrun", "train.py"],
                       "backend": "kubeflow", "nodes": len(NODES),
                       "kubeflow": {"runtime": "torch-distributed", "image": "trainer:1"}})
    sides = []
    for side, kind in (("changed", SettledBackend), ("full", EveryJobMapped)):
        (tmp_path / side).mkdir()
        conf = fake.write_kubeconfig(tmp_path / side / "kubeconfig", namespace="team")
        backend = kind(kubeconfig=str(conf), clock=clock, retries=1, backoff_s=0.0,
                       timeout_s=2.0,
                       informer_settings=InformerSettings(backoff_s=0.05, max_backoff_s=0.2))
        backend.fake = fake
        if kind is EveryJobMapped:
            backend.reports_changes = False
        store = open_store(f"sqlite://{tmp_path / side / 'r.sqlite3'}")
        ids = [create_job(store, spec, backend.declarations(), clock()) for _ in range(4)]
        sides.append((backend, store, ids, Supervisor(store, _serving(backend), clock=clock)))
    made: set[str] = set()
    try:
        for _ in range(40):
            for _, _, _, sup in sides:
                sup.tick()
            # the controllers: each pair of TrainJobs (job k of either record) gets the same
            what = rng.choices(["materialize", "terminate", "fail", "node_lost", "node_back",
                                "clock", "steady", "delete"], [4, 2, 0.7, 2, 2, 2, 2, 0.3])[0]
            k = rng.randrange(4)
            at = rng.choice([tr.T1, tr.T2])
            for _, store, ids, _ in sides:
                job = fold(store.read(ids[k]), clock())
                refs = [s.ref for s in job.submissions if s.ref is not None]
                ns, name = refs[-1].split("/") if refs else ("", "")
                tj = fake.get("TrainJob", ns, name) if refs else None
                if tj is None:
                    continue
                pods = sorted(p["metadata"]["name"] for p in fake.all("Pod")
                              if p["metadata"]["labels"].get(tr.JOBSET_NAME_LABEL) == name)
                if what == "materialize" and name not in made and not tj["spec"].get("suspend"):
                    tr.materialize(fake, ns, name, NODES)
                    made.add(name)
                elif what == "terminate" and pods:
                    tr.terminate(fake, ns, pods[0], reason="Error", exit_code=1, at=at)
                elif what == "fail":
                    tr.set_conditions(fake, "TrainJob", ns, name, tr.cond(
                        "Failed", reason="FailedJobs", message="jobset failed", at=tr.T2))
                elif what == "delete":
                    fake.remove("TrainJob", ns, name)
            if what == "node_lost":
                fake.put(tr.node(rng.choice(NODES), lost=True, since=tr.T2))
            elif what == "node_back":
                fake.put(tr.node(rng.choice(NODES)))
            elif what == "clock":
                clock.now += timedelta(seconds=rng.choice([5, 30, 400]))
        (_, a_store, a_ids, _), (_, b_store, b_ids, _) = sides
        for k in range(4):
            assert _events_of(a_store, a_ids[k]) == _events_of(b_store, b_ids[k]), (seed, k)
    finally:
        for backend, _, _, _ in sides:
            backend.close()
