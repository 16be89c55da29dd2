"""One bad job never stops the others (issue 13): a record that cannot be decoded, or a
backend that cannot be built here, marks only its own job, in the supervisor's tick and in
`ls` / `status`. Real SQLite file, real local backend."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from tests.specs import parse_spec

from dispatch.backends.registry import Backends, declarations_for, make_backend
from dispatch.core.model import State
from dispatch.service import Service
from dispatch.service.requests import create_job
from dispatch.service.views import SCHEDULER_UNUSABLE, status_json
from dispatch.stores.sqlite import SQLiteStore
from dispatch.supervise.loop import utcnow


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Service:
    monkeypatch.setenv("DISPATCH_LOCAL_ROOT", str(tmp_path / "local"))
    monkeypatch.setenv("DISPATCH_KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    return Service(SQLiteStore(tmp_path / "r.sqlite3"), Backends(make_backend))


def local_job(service: Service, name: str) -> str:
    return create_job(service.store, parse_spec({"name": name, "command": ["true"]}),
                      declarations_for("local"), utcnow())


def wait_done(service: Service, job_id: str) -> None:
    sup = service.supervisor()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        sup.tick()
        if service.job(job_id).outcome is not None:
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish")


def test_an_undecodable_record_never_stops_the_others(service: Service, tmp_path: Path) -> None:
    bad = local_job(service, "bad")
    good = local_job(service, "good")
    with sqlite3.connect(tmp_path / "r.sqlite3") as db:  # a record from a newer build
        db.execute("UPDATE events SET body = ? WHERE job_id = ? AND seq = 1",
                   (b'{"type":"created-by-a-newer-build","seq":1}', bad))
    report = service.supervisor().tick()
    assert any(bad in e for e in report.errors), report
    wait_done(service, good)
    assert service.job(good).outcome is not None
    rows = {v.job: v for v in service.jobs(include_finished=True)}
    assert rows[good].status is not None and rows[good].status.state is State.SUCCEEDED
    assert rows[bad].status is None and rows[bad].error is not None
    doc = status_json(rows[bad])
    assert doc["job"] == bad and doc["error"]["code"] == "store-unusable"


def test_a_backend_that_cannot_be_built_marks_only_its_jobs(service: Service) -> None:
    # Recorded behind the service's back (the service refuses it: no Kubernetes config).
    kube = create_job(service.store, parse_spec({
        "name": "kf", "backend": "kubeflow", "command": ["true"],
        "kubeflow": {"runtime": "torch-distributed"}}), declarations_for("kubeflow"), utcnow())
    good = local_job(service, "good")
    report = service.supervisor().tick()
    assert any("kubeflow" in e for e in report.errors), report
    wait_done(service, good)
    views = {v.job: v for v in service.jobs(include_finished=True)}
    assert views[kube].scheduler == SCHEDULER_UNUSABLE and "kubeconfig" in views[kube].problem
    assert views[good].status is not None and views[good].status.state is State.SUCCEEDED
    # A job that never reached a scheduler can be cancelled without one.
    service.cancel(kube)
    service.supervisor().tick()
    job = service.job(kube)
    assert job.outcome is not None and job.outcome.state is State.CANCELLED


def test_submit_to_an_unusable_backend_records_nothing(service: Service) -> None:
    from dispatch.errors import BackendError

    spec = parse_spec({"name": "kf", "backend": "kubeflow", "command": ["true"],
                       "kubeflow": {"runtime": "torch-distributed"}})
    with pytest.raises(BackendError, match="kubeconfig .* does not exist"):
        service.submit(spec)
    assert service.store.list_jobs() == []
