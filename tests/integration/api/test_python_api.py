"""dispatch.submit / get / jobs and Job's methods, against real processes on the local
backend. No supervisor runs elsewhere: Job.wait supervises the job itself."""

from __future__ import annotations

import threading
from pathlib import Path

import msgspec
import pytest
import yaml
from api_harness import Env

import dispatch
from dispatch import BadInput, CauseKind, NotFound, State, StateConflict
from dispatch.api import follow_logs
from dispatch.core.spec import JobSpec

WAIT_S = 90.0  # an upper bound for a slow shared machine, never a timing assertion

FAIL_FIRST = ("import os, sys\n"
              "print('submission', os.environ['DISPATCH_SUBMISSION'], flush=True)\n"
              "sys.exit(3 if os.environ['DISPATCH_SUBMISSION'] == '1' else 0)\n")
SEGV_FIRST = ("import os, signal, sys\n"
              "if os.environ['DISPATCH_SUBMISSION'] == '1': os.kill(os.getpid(), signal.SIGSEGV)\n"
              "sys.exit(0)\n")
SLEEP = "import time; time.sleep(120)"


def test_submit_a_mapping_and_wait_for_success(env: Env) -> None:
    job = dispatch.submit(env.spec("hello", "print('hello from rank 0')"), store=env.store)
    assert isinstance(job, dispatch.Job)
    st = job.wait(timeout=WAIT_S, poll=0.2)
    assert st.state is State.SUCCEEDED and st.settled
    assert st.cause is not None and st.cause.kind is CauseKind.NONE
    assert job.status() == st
    # Read through the snapshot written at the outcome, and still plain tuples: a caller
    # may encode what the API hands out with any encoder.
    for read in (job.status(), job.record()):
        assert type(read.history) is tuple and type(read.escalations) is tuple
        assert msgspec.json.decode(msgspec.json.encode(read))["state"] == "succeeded"
    assert job.name == "hello"
    assert list(job.logs()) == ["hello from rank 0"]
    types = [type(h.event).__name__ for h in job.history()]
    assert types[0] == "JobCreated" and "OutcomeCommitted" in types
    assert [h.seq for h in job.history()] == sorted(h.seq for h in job.history())


def test_submit_a_path_and_a_jobspec_get_by_name_and_list(env: Env, tmp_path: Path) -> None:
    path = tmp_path / "sleepy.yaml"
    path.write_text(yaml.safe_dump(env.spec("sleepy", SLEEP)))
    a = dispatch.submit(path, store=env.store)
    b = dispatch.submit(JobSpec(name="quick", command=("true",)), store=env.store)
    assert dispatch.get("sleepy", store=env.store) == a
    assert dispatch.get(b.id, store=env.store) == b
    assert b.wait(timeout=WAIT_S, poll=0.2).state is State.SUCCEEDED
    assert [j.id for j in dispatch.jobs(store=env.store)] == [a.id]
    assert {j.id for j in dispatch.jobs(all=True, store=env.store)} == {a.id, b.id}
    a.cancel()
    assert a.wait(timeout=WAIT_S, poll=0.2).state is State.CANCELLED


def test_wait_times_out_then_cancel_is_recorded_and_carried_out(env: Env) -> None:
    job = dispatch.submit(env.spec("slow", SLEEP), store=env.store)
    with pytest.raises(TimeoutError, match=job.id):
        job.wait(timeout=1.0, poll=0.2)
    assert job.status().state in (State.PENDING, State.RUNNING)
    after = job.cancel()
    assert after.job == job.id
    assert any(type(h.event).__name__ == "CancelRequested" for h in job.history())
    st = job.wait(timeout=WAIT_S, poll=0.2)
    assert st.state is State.CANCELLED
    assert st.cause is not None and st.cause.kind is CauseKind.CANCELLED
    with pytest.raises(StateConflict, match="already cancelled"):
        job.cancel()


def test_logs_follow_across_submissions_with_a_marker(env: Env) -> None:
    policy = {"rules": [{"on": ["non-zero-exit"], "action": "resubmit", "budget": 1}]}
    job = dispatch.submit(env.spec("twice", FAIL_FIRST, policy=policy), store=env.store)
    waited: list[dispatch.Status] = []
    waiter = threading.Thread(target=lambda: waited.append(job.wait(timeout=WAIT_S, poll=0.2)))
    waiter.start()
    lines = list(job.logs(follow=True))  # ends at the committed outcome
    waiter.join(WAIT_S)
    assert waited and waited[0].state is State.SUCCEEDED and waited[0].submissions == 2
    assert lines == ["submission 1", "== dispatch: submission 2 after non-zero-exit (exit 3)",
                     "submission 2"]
    assert list(job.logs(submission=1)) == ["submission 1"]


def test_following_from_the_first_submission_whenever_the_reader_starts(env: Env) -> None:
    # run --logs's reader may start late on a loaded machine: after the resubmission, or
    # after the outcome. From the first submission it still reads every one, in order.
    policy = {"rules": [{"on": ["non-zero-exit"], "action": "resubmit", "budget": 1}]}
    job = dispatch.submit(env.spec("late", FAIL_FIRST, policy=policy), store=env.store)
    assert job.wait(timeout=WAIT_S, poll=0.2).submissions == 2
    assert list(follow_logs(env.store, job.id, follow=True, from_first=True)) == [
        "submission 1", "== dispatch: submission 2 after non-zero-exit (exit 3)",
        "submission 2"]
    assert list(follow_logs(env.store, job.id, follow=True)) == ["submission 2"]


def test_hold_then_resubmit_and_hold_then_give_up(env: Env) -> None:
    policy = {"rules": [{"on": ["unknown"], "action": "hold"}]}
    kept = dispatch.submit(env.spec("kept", SEGV_FIRST, policy=policy), store=env.store)
    dropped = dispatch.submit(env.spec("dropped", SEGV_FIRST, policy=policy), store=env.store)
    for job in (kept, dropped):
        with pytest.raises(TimeoutError):  # held: no outcome until a person decides
            job.wait(timeout=8.0, poll=0.2)
        assert job.status().state is State.HELD
    with pytest.raises(StateConflict, match="not held"):
        dispatch.submit(env.spec("free", "pass"), store=env.store).resubmit()
    kept.resubmit()
    st = kept.wait(timeout=WAIT_S, poll=0.2)
    assert st.state is State.SUCCEEDED and st.submissions == 2
    dropped.give_up()
    st = dropped.wait(timeout=WAIT_S, poll=0.2)
    assert st.state is State.FAILED
    assert any("given up" in e.message for e in st.escalations)


def test_supersede_runs_a_finished_job_again(env: Env) -> None:
    old = dispatch.submit(env.spec("again", "pass"), store=env.store)
    with pytest.raises(StateConflict, match="not finished"):
        old.supersede()
    old.wait(timeout=WAIT_S, poll=0.2)
    new = old.supersede()
    assert new.id != old.id
    assert new.wait(timeout=WAIT_S, poll=0.2).state is State.SUCCEEDED
    assert old.status().superseded_by == new.id and new.status().supersedes == old.id


def test_errors_are_the_clis(env: Env) -> None:
    with pytest.raises(NotFound) as nf:
        dispatch.get("no-such-job", store=env.store)
    assert nf.value.exit_code == 3
    with pytest.raises(BadInput, match="command") as bad:
        dispatch.submit({"name": "x", "command": "python train.py"}, store=env.store)
    assert bad.value.exit_code == 2
    with pytest.raises(BadInput, match="unknown key"):
        dispatch.submit({"name": "x", "command": ["true"], "nodez": 2}, store=env.store)
    job = dispatch.submit(env.spec("nolog", SLEEP), store=env.store)
    with pytest.raises(NotFound, match="no scheduler object for submission 9"):
        list(job.logs(submission=9))
    job.cancel()
    assert job.wait(timeout=WAIT_S, poll=0.2).state is State.CANCELLED


def test_unenforced_rule_warns(env: Env) -> None:
    policy = {"rules": [{"on": ["preempted"], "action": "requeue", "budget": 1}]}
    with pytest.warns(UserWarning, match="does not enforce requeue"):
        job = dispatch.submit(env.spec("warned", "pass", policy=policy), store=env.store)
    job.cancel()


@pytest.mark.parametrize("workdir", ["/tmp/" + "a" * 256, "/" + "b/" * 2048])
def test_a_workdir_no_filesystem_call_can_take_is_bad_input(env: Env, workdir: str) -> None:
    # Was an untyped OSError (ENAMETOOLONG) from the local backend's is_dir.
    for spec in ({"name": "x", "command": ["true"], "workdir": workdir},
                 JobSpec(name="x", command=("true",), workdir=workdir)):
        with pytest.raises(BadInput, match="workdir") as bad:
            dispatch.submit(spec, store=env.store)
        assert bad.value.exit_code == 2
    assert dispatch.jobs(all=True, store=env.store) == []
