"""dispatch.Executor end to end on the local backend (issue 26): real node processes run the
bootstrap (python -m dispatch.fn), a real SQLite record; the caller's result() supervises."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from api_harness import Env

import dispatch
from dispatch import CauseKind, State
from dispatch.fn.calls import CallTooLarge, NotPicklable
from dispatch.service import Service

WAIT_S = 120.0  # an upper bound for a slow shared machine, never a timing assertion


def add(a: int, b: int) -> int:
    print(f"adding {a} and {b}", flush=True)
    print("to stderr", file=__import__("sys").stderr, flush=True)
    return a + b


class Broken(Exception):
    pass


def raise_broken(word: str) -> None:
    raise Broken(f"it broke: {word}")


def whoami() -> dict[str, str]:
    print(f"I am rank {os.environ['RANK']}", flush=True)
    return {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                       "MASTER_PORT")}


def sleep_long() -> None:
    time.sleep(300)


class Counter(dispatch.Checkpointable):
    """Counts to ``total``; on the first submission it stops at 3 (and says so in
    ``marker``) until it is preempted. The checkpoint keeps ``count``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.count = 0

    def __call__(self, total: int) -> tuple[int, int, str]:
        started_at = self.count
        while self.count < total:
            self.count += 1
            if os.environ["DISPATCH_SUBMISSION"] == "1" and self.count == 3:
                Path(self.marker).write_text("at 3")
                time.sleep(300)
        return started_at, self.count, os.environ["DISPATCH_SUBMISSION"]


def executor(harness: Env, /, **parameters: Any) -> dispatch.Executor:
    return dispatch.Executor(harness.tmp / "runs", store=harness.store, **parameters)


def test_a_return_value_its_output_and_private_files(env: Env) -> None:
    job = executor(env).submit(add, 2, b=3)
    assert isinstance(job, dispatch.FunctionJob)
    assert job.result(timeout=WAIT_S, poll=0.2) == 5
    assert job.done() and job.exception() is None
    assert job.stdout() == "adding 2 and 3\n"
    assert job.stderr() == "to stderr\n"
    assert "adding 2 and 3" in list(job.logs())  # the job's own log has it too
    assert stat.S_IMODE(os.stat(job.folder).st_mode) == 0o700
    files = sorted(os.listdir(job.folder))
    assert "call.pkl" in files and f"{job.id}.s1.result.pkl" in files
    assert {stat.S_IMODE(os.stat(job.folder / f).st_mode) for f in files} == {0o600}
    assert job.job.record().state is State.SUCCEEDED


def test_an_exception_comes_back_with_its_type_words_and_traceback(env: Env) -> None:
    job = executor(env).submit(raise_broken, "the flux capacitor")
    with pytest.raises(dispatch.FunctionFailed) as caught:
        job.result(timeout=WAIT_S, poll=0.2)
    err = caught.value
    assert isinstance(err, dispatch.JobFailed)
    assert err.status.state is State.FAILED
    assert err.status.cause is not None and err.status.cause.kind is CauseKind.NON_ZERO_EXIT
    assert err.remote is not None and err.remote.rank == 0
    assert err.remote.type.endswith("Broken")
    assert err.remote.message == "it broke: the flux capacitor"
    assert "in raise_broken" in err.remote.traceback
    assert "bootstrap.py" not in err.remote.traceback  # the user's frames, not ours
    assert isinstance(err.__cause__, Broken)
    assert "it broke: the flux capacitor" in str(err) and "non-zero-exit" in str(err)
    # the record's application error is the function's exception (app_capture)
    assert err.error is not None and "it broke: the flux capacitor" in err.error.message
    again = job.exception()
    assert isinstance(again, dispatch.FunctionFailed) and again.remote is not None
    assert (again.remote.type, again.remote.traceback) == (err.remote.type, err.remote.traceback)
    assert "Broken: it broke" in (job.stderr() or "")


def test_two_nodes_each_see_their_rank(env: Env) -> None:
    job = executor(env, nodes=2).submit(whoami)
    seen = job.result(timeout=WAIT_S, poll=0.2)
    assert seen["RANK"] == "0" and seen["WORLD_SIZE"] == "2" and seen["LOCAL_RANK"] == "0"
    assert seen["MASTER_ADDR"] and seen["MASTER_PORT"].isdigit()
    assert job.stdout(rank=0) == "I am rank 0\n"
    assert job.stdout(rank=1) == "I am rank 1\n"


def test_an_injected_preemption_resumes_from_the_checkpoint(env: Env) -> None:
    marker = env.tmp / "at-3"
    policy = {"rules": [{"on": ["preempted"], "action": "resubmit", "budget": 1}]}
    job = executor(env, policy=policy).submit(Counter(str(marker)), 10)
    results: list[Any] = []
    waiter = threading.Thread(target=lambda: results.append(job.result(timeout=WAIT_S,
                                                                          poll=0.2)))
    waiter.start()
    deadline = time.monotonic() + WAIT_S
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), "the first submission never reached step 3"
    with Service.open(env.store) as service:
        backend = service.backends("local")
        backend.inject(job.id, "preempt")  # type: ignore[attr-defined]
    waiter.join(WAIT_S)
    # resumed at 3 (the checkpoint's count), finished at 10, on the second submission
    assert results == [(3, 10, "2")]
    st = job.job.record()
    assert st.submissions == 2
    assert [t.cause.kind for t in st.history
            if t.state is State.RECOVERING and t.cause is not None] == [CauseKind.PREEMPTED]
    assert (job.folder / f"{job.id}.checkpoint.pkl").exists()
    assert "resuming from the checkpoint" in (job.stderr() or "")


def test_a_lost_node_resumes_from_rank_0s_checkpoint(env: Env) -> None:
    marker = env.tmp / "at-3"
    policy = {"rules": [{"on": ["node-lost"], "action": "resubmit", "budget": 1}]}
    job = executor(env, nodes=2, policy=policy).submit(Counter(str(marker)), 7)
    results: list[Any] = []
    waiter = threading.Thread(target=lambda: results.append(job.result(timeout=WAIT_S,
                                                                          poll=0.2)))
    waiter.start()
    deadline = time.monotonic() + WAIT_S
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), "the first submission never reached step 3"
    with Service.open(env.store) as service:
        service.backends("local").inject(job.id, "lose-node", 1)  # type: ignore[attr-defined]
    waiter.join(WAIT_S)
    # rank 1's node is lost; the supervisor stops the rest (SIGTERM), rank 0 checkpoints
    assert results == [(3, 7, "2")]
    st = job.job.record()
    assert [t.cause.kind for t in st.history
            if t.state is State.RECOVERING and t.cause is not None] == [CauseKind.NODE_LOST]


def test_map_array_of_three_items(env: Env) -> None:
    jobs = executor(env).map_array(add, [1, 2, 3], [10, 20, 30])
    assert len(jobs) == 3 and len({j.id for j in jobs}) == 3
    assert [j.result(timeout=WAIT_S, poll=0.2) for j in jobs] == [11, 22, 33]


def test_an_unpicklable_function_fails_at_submit_and_records_nothing(env: Env) -> None:
    lock = threading.Lock()
    ex = executor(env)
    with pytest.raises(NotPicklable, match="cannot be pickled") as caught:
        ex.submit(lambda: lock.locked())
    assert isinstance(caught.value, dispatch.BadInput)
    assert dispatch.jobs(all=True, store=env.store) == []
    assert not (env.tmp / "runs").exists() or os.listdir(env.tmp / "runs") == []


def test_a_call_over_the_bound_is_refused_at_submit(env: Env,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPATCH_FN_MOST_CALL_BYTES", "4096")
    with pytest.raises(CallTooLarge, match="more than the 4096"):
        executor(env).submit(len, b"x" * 10_000)
    assert dispatch.jobs(all=True, store=env.store) == []


def test_a_result_over_the_bound_fails_the_job_saying_so(env: Env) -> None:
    ex = executor(env, env={"DISPATCH_FN_MOST_RESULT_BYTES": "4096"})
    job = ex.submit(bytes, 10_000)
    with pytest.raises(dispatch.FunctionFailed) as caught:
        job.result(timeout=WAIT_S, poll=0.2)
    assert caught.value.remote is not None
    assert caught.value.remote.type.endswith("ResultTooLarge")
    assert "more than the 4096" in caught.value.remote.message


def test_batch_records_the_jobs_when_the_block_ends(env: Env) -> None:
    ex = executor(env)
    with ex.batch():
        a = ex.submit(add, 1, 1)
        b = ex.submit(add, 2, 2)
        assert dispatch.jobs(all=True, store=env.store) == []
        with pytest.raises(dispatch.StateConflict, match="batch"):
            _ = a.id
    assert {j.id for j in dispatch.jobs(all=True, store=env.store)} == {a.id, b.id}
    assert (a.result(timeout=WAIT_S, poll=0.2), b.result(timeout=WAIT_S, poll=0.2)) == (2, 4)
    with pytest.raises(RuntimeError, match="stop"):
        with ex.batch():
            ex.submit(add, 3, 3)
            raise RuntimeError("stop")
    assert len(dispatch.jobs(all=True, store=env.store)) == 2


def test_cancel_then_result_says_cancelled(env: Env) -> None:
    job = executor(env).submit(sleep_long)
    assert not job.done()  # one supervising pass: submitted, not finished
    job.cancel()
    with pytest.raises(dispatch.FunctionFailed, match="cancelled") as caught:
        job.result(timeout=WAIT_S, poll=0.2)
    assert caught.value.status.state is State.CANCELLED and caught.value.remote is None


def test_done_moves_the_job_on(env: Env) -> None:
    job = executor(env).submit(add, 20, 22)
    deadline = time.monotonic() + WAIT_S
    while not job.done():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert job.result(timeout=WAIT_S) == 42


def test_the_bootstrap_runs_nothing_from_a_folder_others_can_write(tmp_path: Path) -> None:
    import subprocess
    import sys

    from dispatch.fn.calls import Call, Names, encode_call, make_folder, write_file

    folder = make_folder(tmp_path / "call")
    write_file(Names(folder, "").call(), encode_call(Call(print, ("ran",))))
    argv = [sys.executable, "-m", "dispatch.fn", str(folder)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "DISPATCH_"))}
    ok = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert ok.returncode == 0 and ok.stdout == "ran\n"
    os.chmod(folder, 0o777)
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 1 and "ran" not in refused.stdout
    assert "is not ours alone" in refused.stderr
    usage = subprocess.run([sys.executable, "-m", "dispatch.fn"], capture_output=True,
                           text=True, timeout=60)
    assert usage.returncode == 2 and "usage: python -m dispatch.fn" in usage.stderr


USER_MODULE = '''
import colorsys


def triple(x):
    return x * 3, colorsys.__file__
'''


def test_nothing_planted_in_a_shared_workdir_runs_and_the_users_module_still_imports(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 32, item 1: a 0777 working directory where another user planted a dispatch/
    # package, a cloudpickle.py, a msgspec.py and a colorsys.py, each writing the marker
    # when imported; the job's PYTHONPATH names it too. A function of the test module and
    # one of a module of the submitter's own in that directory (pickled by reference) still
    # return their values, and nothing planted ever runs.
    import importlib.util
    import sys

    from planted import plant, ran

    shared = env.tmp / "scratch"
    marker = env.tmp / "planted-ran"
    plant(shared, marker)
    (shared / "usermod_fnsafe.py").write_text(USER_MODULE)
    spec = importlib.util.spec_from_file_location("usermod_fnsafe", shared / "usermod_fnsafe.py")
    assert spec is not None and spec.loader is not None
    usermod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "usermod_fnsafe", usermod)
    spec.loader.exec_module(usermod)
    monkeypatch.chdir(shared)  # the job's working directory: where submit ran
    monkeypatch.setenv("PYTHONPATH", str(shared))
    ex = executor(env)
    add_job = ex.submit(add, 2, 3)
    user_job = ex.submit(usermod.triple, 7)
    assert add_job.result(timeout=WAIT_S, poll=0.2) == 5
    value, colorsys_file = user_job.result(timeout=WAIT_S, poll=0.2)
    assert value == 21
    # The standard library's colorsys, not the one planted beside the user's module.
    assert not colorsys_file.startswith(str(shared)), colorsys_file
    assert ran(marker) == []


def test_a_damaged_result_file_is_a_typed_error_naming_it(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 32, item 4: each way a result file can be damaged is a DamagedFile naming it,
    # never a raw EOFError, UnpicklingError or ModuleNotFoundError.
    import pickle

    from dispatch.errors import DamagedFile
    from dispatch.fn import calls

    job = executor(env).submit(add, 1, 2)
    assert job.result(timeout=WAIT_S, poll=0.2) == 3
    path = job.folder / f"{job.id}.s1.result.pkl"
    damaged = [
        ("cut short", pickle.dumps(list(range(100)))[:20]),  # UnpicklingError
        ("cut short", b""),  # EOFError
        ("not a pickle dispatch wrote", b"\x00garbage\xff" * 10),
        ("refers to code this process cannot import", b"cno_such_module_fnsafe\nthing\n."),
    ]
    for why, data in damaged:
        calls.write_file(path, data)
        with pytest.raises(DamagedFile, match=why) as caught:
            job.result(timeout=WAIT_S)
        assert str(path) in str(caught.value)
    # Over the bound: refused from its size, before a byte of it is read (a sparse file).
    calls.write_file(path, b"")
    os.truncate(path, calls.MOST_RESULT_BYTES + 1)

    def no_read(fd: int, most: int) -> bytes:
        raise AssertionError(f"read {most} bytes of a file over the bound")

    monkeypatch.setattr(calls, "read_at_most", no_read)
    with pytest.raises(DamagedFile, match=f"{calls.MOST_RESULT_BYTES + 1} bytes, more than"
                       ) as caught:
        job.result(timeout=WAIT_S)
    assert str(path) in str(caught.value)


def test_a_damaged_error_file_is_a_typed_error_naming_it(env: Env) -> None:
    from dispatch.errors import DamagedFile
    from dispatch.fn import calls

    job = executor(env).submit(raise_broken, "once")
    with pytest.raises(dispatch.FunctionFailed):
        job.result(timeout=WAIT_S, poll=0.2)
    path = job.folder / f"{job.id}.s1.r0.error.pkl"
    calls.write_file(path, b"cno_such_module_fnsafe\nBroken\n.")
    with pytest.raises(DamagedFile, match="cannot import") as caught:
        job.result(timeout=WAIT_S)
    assert str(path) in str(caught.value)


def test_a_module_only_the_jobs_pythonpath_names_still_imports(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # The isolated bootstrap ignores PYTHONPATH for dispatch's own imports, then gives the
    # call the job's PYTHONPATH (here from the executor's env=): a function of a module found
    # only there is still imported and run.
    import importlib.util
    import sys

    lib = env.tmp / "lib"
    lib.mkdir()
    (lib / "jobonly_fnsafe.py").write_text("def double(x):\n    return 2 * x\n")
    spec = importlib.util.spec_from_file_location("jobonly_fnsafe", lib / "jobonly_fnsafe.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "jobonly_fnsafe", module)
    spec.loader.exec_module(module)
    job = executor(env, env={"PYTHONPATH": str(lib)}).submit(module.double, 21)
    assert job.result(timeout=WAIT_S, poll=0.2) == 42


def raise_from_a_module_only_the_node_has(lib: str) -> None:
    import sys

    sys.path.insert(0, lib)
    import nodeonly_fnsafe  # type: ignore[import-not-found]

    raise nodeonly_fnsafe.NodeError("only the node knows this class")


def test_an_exception_whose_class_the_submitter_cannot_import_still_comes_back(
        env: Env) -> None:
    # Not a damaged file: the exception's type, words and traceback come back, and the
    # exception itself is None (its class is in a module the submitter cannot import).
    lib = env.tmp / "nodelib"
    lib.mkdir()
    (lib / "nodeonly_fnsafe.py").write_text("class NodeError(Exception):\n    pass\n")
    job = executor(env).submit(raise_from_a_module_only_the_node_has, str(lib))
    with pytest.raises(dispatch.FunctionFailed) as caught:
        job.result(timeout=WAIT_S, poll=0.2)
    remote = caught.value.remote
    assert remote is not None and remote.type == "nodeonly_fnsafe.NodeError"
    assert remote.message == "only the node knows this class" and remote.exception is None
    assert "raise nodeonly_fnsafe.NodeError" in remote.traceback
