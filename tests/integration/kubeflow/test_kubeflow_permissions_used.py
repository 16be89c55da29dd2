"""What the kubeflow backend really asks of the API server is what permissions.py lists (and
so what `dispatch doctor` checks and `dispatch kubeflow manifests` grants): every request of
a job's whole life on the stand-in (its scope, admit, submit, a retried submit, looks by list
and by watch, logs, the gate, stop) is read as the API server's authorizer reads it."""

from __future__ import annotations

from pathlib import Path

from kubeflow_support import Clock, make_backend
from test_kubeflow_scenarios import NODES, submit
from tests.specs import parse_spec

from dispatch.backends.kubeflow.permissions import PERMISSIONS
from dispatch.backends.kubeflow.scope import cluster_id
from kube_fake import FakeApiServer
from kube_fake import trainer as tr
from kube_fake.server import access_of


def test_every_request_of_a_jobs_life_is_a_listed_permission(
        fake: FakeApiServer, tmp_path: Path, clock: Clock) -> None:
    listed = {p.key for p in PERMISSIONS}
    for n in NODES:
        fake.put(tr.node(n))
    for informer in (True, False):
        backend = make_backend(fake, tmp_path, clock, informer=informer)
        try:
            cluster_id(backend.kube, None)  # which cluster: the job's scope (scope.py)
            backend.admit(parse_spec({"name": "t", "command": ["x"], "backend": "kubeflow",
                                      "kubeflow": {"runtime": "torch-distributed"}}))
            job = f"job-{informer}".lower()
            token, ns, name = submit(backend, job, gated=True)
            assert submit(backend, job, gated=True)[2] == name  # 409: the one already made
            tr.materialize(fake, ns, name, NODES)
            backend.discover([token], [])
            backend.open_gate(f"{ns}/{name}")
            backend.discover([token], [])
            for log in backend.logs(f"{ns}/{name}"):
                log.read(None, final=False)
            backend.stop(f"{ns}/{name}")
        finally:
            backend.close()
    used = {a[:3] for r in fake.requests if (a := access_of(r.method, r.path, r.query))}
    assert used - listed == set(), "asked but not in permissions.PERMISSIONS"
    # and nothing listed is left unused but the runtime reads, which only doctor makes
    assert {p.key for p in PERMISSIONS} - used == {
        ("get", "trainer.kubeflow.org", "clustertrainingruntimes"),
        ("get", "trainer.kubeflow.org", "trainingruntimes"),
    }
