"""Issue 23 on Kubeflow, staged on the stand-in API server (it validates every object against
the real CRD schemas and serves pod logs as the API server does: ``pods/NAME/log`` with
``container``, ``tailLines``, ``limitBytes``): the first failing container's error is its
``terminated.message`` when it left one, else its last log lines (bounded, reduced to the
exception line); neither gives an error without words and a note. The cause is the scheduler's
in every case."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.specs import parse_spec

from dispatch.backends.base import Submission
from dispatch.backends.kubeflow import KubeflowBackend
from dispatch.core.model import CauseKind, ObjectReport, State
from kube_fake import FakeApiServer
from kube_fake import trainer as tr

NODES = ["n1", "n2"]
CRDS = Path(__file__).resolve().parents[2] / "fixtures" / "k8s-crds"
TRACEBACK = ("Traceback (most recent call last):\n  File \"/w/train.py\", line 9, in main\n"
             "FloatingPointError: loss is NaN at step 7\n")


def look(backend: KubeflowBackend, token: str) -> ObjectReport:
    found = backend.discover([token], [])
    assert found.complete
    (report,) = found.objects
    return report


@pytest.fixture
def failed(fake: FakeApiServer, backend: KubeflowBackend):  # type: ignore[no-untyped-def]
    """A two-node TrainJob; stage(message=...) fails node 1 first (exit 1), node 0 after it
    (SIGTERM, the JobSet's doing), then marks the TrainJob failed; returns the token."""
    for n in NODES:
        fake.put(tr.node(n))
    spec = parse_spec({"name": "train", "command": ["torchrun", "train.py"],
                       "backend": "kubeflow", "nodes": len(NODES),
                       "kubeflow": {"runtime": "torch-distributed", "image": "trainer:1"}})
    ref = backend.submit(Submission(job_id="job-a", number=0, token="job-a.0", spec=spec))
    ns, name = ref.split("/")
    pods = tr.materialize(fake, ns, name, NODES)

    def stage(message: str | None, log: str = "") -> tuple[str, list[str]]:
        if log:
            fake.write_log(ns, pods[1], log)
        fake.write_log(ns, pods[0], "node 0 was fine until the end\n")
        tr.terminate(fake, ns, pods[1], reason="Error", exit_code=1, at=tr.T1, message=message)
        tr.terminate(fake, ns, pods[0], reason="Error", exit_code=143, at=tr.T2)
        cond = tr.cond("Failed", reason="FailedJobs", message=f"jobset failed: job {name}-node-0",
                       at=tr.T2)
        tr.set_conditions(fake, "JobSet", ns, name, cond)
        tr.set_conditions(fake, "TrainJob", ns, name, cond)
        tr.finish_jobs_status(fake, ns, name, succeeded=0, failed=1)
        return "job-a.0", pods

    return stage


def _log_requests(fake: FakeApiServer) -> list[dict[str, str]]:
    return [r.query for r in fake.requests if r.path.endswith("/log")]


def _cause_is_the_schedulers(report: ObjectReport, *, from_logs: bool = True) -> None:
    assert report.state is State.FAILED
    assert report.cause.kind is CauseKind.NON_ZERO_EXIT and report.cause.exit_code == 1
    assert "FailedJobs" in report.cause.detail
    if from_logs:  # the log's words are the application's only (a termination message is
        # also in the kubelet's status, which the detail quotes verbatim, S2)
        assert "FloatingPointError" not in report.cause.detail + report.cause.note


def test_a_termination_message_is_the_error_and_no_log_is_read(  # type: ignore[no-untyped-def]
        fake: FakeApiServer, backend: KubeflowBackend, failed) -> None:
    token, pods = failed(TRACEBACK, log="Traceback...\nValueError: the log's words\n")
    fake.requests.clear()
    report = look(backend, token)
    _cause_is_the_schedulers(report, from_logs=False)
    error = report.executions[-1].error
    assert error is not None and error.source.value == "termination-message"
    assert error.message == "FloatingPointError: loss is NaN at step 7"
    assert (error.rank, error.node) == (1, "n2")
    assert _log_requests(fake) == []


def test_without_a_termination_message_the_last_log_lines_are_the_error(  # type: ignore[no-untyped-def]
        fake: FakeApiServer, backend: KubeflowBackend, failed) -> None:
    early = "".join(f"step {i}: loss {i / 10}\n" for i in range(200))
    token, pods = failed(None, log="ValueError: an early warning, long gone\n" + early
                         + TRACEBACK + "the job ends here\n")
    fake.requests.clear()
    report = look(backend, token)
    _cause_is_the_schedulers(report)
    error = report.executions[-1].error
    assert error is not None and error.source.value == "output-tail", error
    assert error.message == "FloatingPointError: loss is NaN at step 7"
    assert (error.rank, error.node, error.exit_code) == (1, "n2", 1)
    assert 'File "/w/train.py", line 9' in error.traceback_tail
    assert "early warning" not in error.traceback_tail + error.message  # bounded: 200 lines
    (asked,) = _log_requests(fake)
    assert asked == {"container": "node", "tailLines": "200", "limitBytes": "65536"}, asked
    # read once: a later look keeps the error without asking again
    again = look(backend, token)
    assert again.executions[-1].error == error and _log_requests(fake) == [asked]


def test_a_log_without_an_exception_gives_its_last_line(  # type: ignore[no-untyped-def]
        fake: FakeApiServer, backend: KubeflowBackend, failed) -> None:
    token, _ = failed(None, log="loading\nout of patience at step 9, giving up\n\n")
    error = look(backend, token).executions[-1].error
    assert error is not None and error.source.value == "output-tail"
    assert error.message == "out of patience at step 9, giving up"


def test_neither_message_nor_log_gives_no_words_and_a_note(  # type: ignore[no-untyped-def]
        fake: FakeApiServer, backend: KubeflowBackend, failed) -> None:
    token, pods = failed(None)
    report = look(backend, token)
    _cause_is_the_schedulers(report)
    error = report.executions[-1].error
    assert error is not None and error.message == "" and error.traceback_tail == ""
    assert error.note == (f"container node of pod {pods[1]} left no termination message "
                          "and no log lines")
    assert (error.rank, error.node, error.exit_code) == (1, "n2", 1)


def test_the_trainjob_api_has_no_termination_message_policy_for_dispatch_to_set() -> None:
    """dispatch would set ``terminationMessagePolicy: FallbackToLogsOnError`` on the trainer
    container if the TrainJob API let it; its only per-container overrides (runtimePatches)
    are env, name, securityContext and volumeMounts. Should the CRD gain the field, this fails
    and the manifest should set it."""
    text = (CRDS / "trainer.kubeflow.org_trainjobs.yaml").read_text()
    assert "terminationMessagePolicy" not in text
    doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    patch = schema["properties"]["runtimePatches"]["items"]["properties"]
    pod = (patch["trainingRuntimeSpec"]["properties"]["template"]["properties"]["spec"]
           ["properties"]["replicatedJobs"]["items"]["properties"]["template"]["properties"]
           ["spec"]["properties"]["template"]["properties"]["spec"]["properties"])
    assert sorted(pod["containers"]["items"]["properties"]) == [
        "env", "name", "securityContext", "volumeMounts"]


def test_the_log_errors_kept_are_bounded(  # type: ignore[no-untyped-def]
        fake: FakeApiServer, backend: KubeflowBackend, failed,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived supervisor sees failed pods without end: past the bound the oldest
    container's error is dropped, and asked for again (same words) if that pod is looked at."""
    import dispatch.backends.kubeflow.failed_logs as failed_logs
    monkeypatch.setattr(failed_logs, "LOG_ERRORS_KEPT", 0)
    token, _ = failed(None, log=TRACEBACK)
    fake.requests.clear()
    first = look(backend, token).executions[-1].error
    second = look(backend, token).executions[-1].error
    assert first is not None and first == second
    assert len(_log_requests(fake)) == 2
    assert backend._failed_logs.errors == {}


def test_a_real_torchrun_log_tail_gives_torchruns_rank_not_the_pods_index(  # type: ignore[no-untyped-def]
        fake: FakeApiServer, backend: KubeflowBackend, failed) -> None:
    """Real torchrun output (tests/fixtures/torchrun-c10d/rank1.log): its Root Cause block's
    rank line is 24 lines from the end (a 12-frame traceback follows it). Pod 1 here ran
    rank 1: read from the last 20 lines, torchrun's local rank was lost."""
    real = Path(__file__).resolve().parents[2] / "fixtures" / "torchrun-c10d" / "rank1.log"
    token, _ = failed(None, log=real.read_text())
    error = look(backend, token).executions[-1].error
    assert error is not None and error.source.value == "output-tail"
    assert error.message == "FloatingPointError: loss is nan at step 3"
    assert (error.rank, error.local_rank) == (1, 0), error
