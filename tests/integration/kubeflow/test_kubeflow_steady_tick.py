"""Issue 49: a supervisor's steady tick over Kubeflow jobs asks the API server nothing (no
LIST, no GET: the informer's cache answers), counted by the stand-in API server as the
benchmark counts the real one's requests (bench/bench_k8s_cost.py)."""

from __future__ import annotations

from pathlib import Path

from kubeflow_support import Clock, caught_up, make_backend
from test_kubeflow_scenarios import NODES
from tests.specs import parse_spec

from dispatch.core.model import State
from dispatch.core.record import fold
from dispatch.core.status import project
from dispatch.service.requests import create_job
from dispatch.stores.select import open_store
from dispatch.supervise.loop import Supervisor
from kube_fake import FakeApiServer
from kube_fake import trainer as tr

JOBS = 4


def test_a_supervisors_steady_tick_makes_no_request(
    fake: FakeApiServer, tmp_path: Path, clock: Clock
) -> None:
    for n in NODES:
        fake.put(tr.node(n))
    backend = make_backend(fake, tmp_path, clock)
    store = open_store(f"sqlite://{tmp_path / 'r.sqlite3'}")
    spec = parse_spec({"name": "steady", "command": ["torchrun", "train.py"],
                       "backend": "kubeflow", "nodes": len(NODES),
                       "kubeflow": {"runtime": "torch-distributed", "image": "trainer:1"}})
    ids = [create_job(store, spec, backend.declarations(), clock()) for _ in range(JOBS)]
    sup = Supervisor(store, lambda _n: backend, clock=clock)
    made: set[str] = set()
    try:
        for _ in range(20):  # submit, open the gates; the test plays Trainer and JobSet
            sup.tick()
            for tj in fake.all("TrainJob"):
                meta = tj["metadata"]
                if meta["name"] not in made and not tj["spec"].get("suspend"):
                    tr.materialize(fake, meta["namespace"], meta["name"], NODES)
                    made.add(meta["name"])
            states = [project(fold(store.read(j), clock()), None, clock()).state for j in ids]
            if states == [State.RUNNING] * JOBS:
                break
        assert states == [State.RUNNING] * JOBS, states
        sup.tick()
        assert caught_up(backend, fake)
        fake.reset_requests()
        for _ in range(3):
            report = sup.tick()
            assert report.jobs == JOBS
        # no LIST and no GET (a watch the stand-in ended and the informer reopened from its
        # resourceVersion is the stream's own, counted apart: the API server's verb WATCH)
        asked = [(r.method, r.path) for r in fake.requests if r.query.get("watch") not in
                 ("1", "true")]
        assert asked == [], fake.requests
        states = [project(fold(store.read(j), clock()), None, clock()).state for j in ids]
        assert states == [State.RUNNING] * JOBS
    finally:
        backend.close()
