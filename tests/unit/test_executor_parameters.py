"""dispatch.Executor's parameters map onto the spec (issue 26), the call folder's files and
bounds, the distributed environment the bootstrap derives, and the names the package shows."""

from __future__ import annotations

import os
import pickle
import pydoc
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import dispatch
from dispatch.backends.base import Submission
from dispatch.backends.slurm.script import render
from dispatch.core.spec import SpecError
from dispatch.fn.bootstrap import job_path
from dispatch.fn.calls import (
    Call,
    CallTooLarge,
    Names,
    NotPicklable,
    UnsafeFolder,
    decode_call,
    encode_call,
    import_path,
    make_folder,
    open_to_others,
    read_pickle,
    write_file,
)
from dispatch.fn.checkpoint import checkpoint_hook
from dispatch.fn.distributed import (
    distributed_environment,
    first_host,
    tasks_per_node_environment,
)
from dispatch.support.isolated import LAUNCH, isolated_argv, package_parent


def test_submitit_names_map_onto_the_spec(tmp_path: Path) -> None:
    ex = dispatch.Executor(tmp_path, backend="slurm", nodes=2, timeout_min=90, mem_gb=1.5,
                           slurm_partition="low", gpus_per_node=1, cpus_per_task=2,
                           slurm_additional_parameters={"mail_type": "END"},
                           tasks_per_node=1)
    ex.update_parameters(slurm_exclusive=True,
                         policy={"rules": [{"on": ["preempted"], "action": "resubmit",
                                            "budget": 2}]})
    spec = ex._spec(tmp_path / "call", "train")
    assert spec.backend == "slurm" and spec.nodes == 2 and spec.name == "train"
    assert spec.time_limit == 90 * 60 and spec.memory == int(1.5 * 1024**3)
    assert spec.slurm == {"partition": "low", "gpus_per_node": 1, "cpus_per_task": 2,
                          "extra": ["--mail-type=END"], "exclusive": True}
    assert spec.policy.rules[0].budget == 2
    # Isolated (python -I) with this process's dispatch: nothing from the job's working
    # directory or PYTHONPATH runs as dispatch (issue 32).
    assert spec.command == (sys.executable, "-I", "-c", LAUNCH, package_parent(),
                            "dispatch.fn", str(tmp_path / "call"))


def test_tasks_per_node_on_the_local_backend_is_one_process_per_task(tmp_path: Path) -> None:
    ex = dispatch.Executor(tmp_path, nodes=2, tasks_per_node=3)
    spec = ex._spec(tmp_path / "call", "train")
    assert spec.nodes == 6 and spec.env == {"DISPATCH_FN_TASKS_PER_NODE": "3"}
    assert ex.tasks_per_node == 3 and ex.parameters["nodes"] == 2
    assert tasks_per_node_environment({"RANK": "4", "DISPATCH_FN_TASKS_PER_NODE": "3"}) == \
        {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "3"}
    assert tasks_per_node_environment({"RANK": "4"}) == {}


def test_tasks_per_node_on_slurm_is_srun_tasks_per_node(tmp_path: Path) -> None:
    ex = dispatch.Executor(tmp_path, backend="slurm", nodes=2, tasks_per_node=3)
    spec = ex._spec(tmp_path / "call", "train")
    assert spec.nodes == 2 and spec.slurm["ntasks_per_node"] == 3
    submission = Submission(job_id="j1", number=1, token="j1.1", spec=spec)
    script, argv = render(submission, out_dir=tmp_path)
    assert "--nodes=2" in argv and "--ntasks-per-node=3" in argv
    assert "srun --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=3 " in script
    one = render(Submission(job_id="j1", number=1, token="j1.1",
                            spec=dispatch.Executor(tmp_path, backend="slurm")._spec(
                                tmp_path / "call", "train")), out_dir=tmp_path)
    assert "--ntasks-per-node=1" in one[1]


def test_an_unknown_name_is_refused_with_the_valid_ones(tmp_path: Path) -> None:
    ex = dispatch.Executor(tmp_path)
    with pytest.raises(dispatch.BadInput, match="unknown parameter 'timeout_mins'") as caught:
        ex.update_parameters(timeout_mins=5)
    assert "did you mean 'timeout_min'" in str(caught.value)
    assert "slurm_partition" in str(caught.value)  # the valid names are listed


def test_bad_values_are_refused_as_a_spec_refuses_them(tmp_path: Path) -> None:
    ex = dispatch.Executor(tmp_path)
    with pytest.raises(SpecError, match="nodes"):
        ex.update_parameters(nodes=0)
    with pytest.raises(dispatch.BadInput, match="one process per node"):
        dispatch.Executor(tmp_path, backend="kubeflow").update_parameters(tasks_per_node=4)
    with pytest.raises(dispatch.BadInput, match="timeout_min"):
        ex.update_parameters(timeout_min="soon")
    with pytest.raises(SpecError, match="backend"):
        dispatch.Executor(tmp_path, backend="slurmm")
    with pytest.raises(dispatch.BadInput, match="policy"):
        ex.update_parameters(policy={"rules": [{"on": ["preemted"], "action": "resubmit"}]})
    assert ex.parameters == {"backend": "local"}  # nothing of a refused update stays


def test_an_unpicklable_call_and_an_oversized_one(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    lock = threading.Lock()
    with pytest.raises(NotPicklable, match="cannot be pickled: TypeError"):
        encode_call(Call(lambda: lock))
    monkeypatch.setenv("DISPATCH_FN_MOST_CALL_BYTES", "100")
    with pytest.raises(CallTooLarge, match="more than the 100"):
        encode_call(Call(len, (b"x" * 1000,)))
    ex = dispatch.Executor(tmp_path / "runs")
    with pytest.raises(dispatch.BadInput):
        ex.submit(len, b"x" * 1000)
    assert not (tmp_path / "runs").exists()  # nothing written before the call pickled


def test_a_call_round_trips_with_the_submitters_path(tmp_path: Path) -> None:
    call = decode_call(encode_call(Call(divmod, (7, 2)), sys_path=[str(tmp_path)]))
    assert call() == (3, 1) and str(tmp_path) in sys.path
    sys.path.remove(str(tmp_path))


def test_import_path_keeps_the_submitters_order_and_puts_shared_directories_last() -> None:
    # Issue 32: the call's path is the submitter's, in its order, then what the interpreter
    # has that it lacks; a directory others can write comes after all of them, so a module
    # planted there never shadows one found elsewhere (but one only there is still found).
    shared = {"/scratch", ""}
    path = import_path(installed=["/usr/lib/py", "/site"],
                       wanted=["/home/me/proj", "/scratch", "/usr/lib/py", "/home/me/proj",
                               "", "/job/extra"],
                       open_to_others=lambda entry: entry in shared)
    assert path == ["/home/me/proj", "/usr/lib/py", "/job/extra", "/site", "/scratch", ""]


def test_a_path_entry_is_open_to_others_when_they_can_put_a_module_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o755)
    assert not open_to_others(str(ours))
    everybody = tmp_path / "everybody"
    everybody.mkdir()
    for mode in (0o777, 0o1777):  # sticky or not, a new name can be made there
        os.chmod(everybody, mode)
        assert open_to_others(str(everybody))
    assert open_to_others(str(tmp_path / "absent"))  # whoever makes it chooses its modules
    monkeypatch.chdir(everybody)
    assert open_to_others("")  # '' is the working directory
    if os.getuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, 65534, 65534)
        assert open_to_others(str(theirs))


def test_the_jobs_own_path_is_its_workdir_then_its_pythonpath() -> None:
    assert job_path({}, "/w") == ["/w"]
    # An empty entry is the working directory and a relative one is under it, as Python
    # reads PYTHONPATH.
    assert job_path({"PYTHONPATH": f"/a{os.pathsep}{os.pathsep}rel"}, "/w") == [
        "/w", "/a", "/w", "/w/rel"]


def test_the_bootstrap_applies_the_jobs_python_settings_that_isolation_ignored() -> None:
    code = (f"import sys; sys.path.insert(0, {package_parent()!r}); "
            "import faulthandler; from dispatch.fn.bootstrap import apply_job_settings; "
            "before = (sys.stdout.line_buffering, sys.dont_write_bytecode, "
            "faulthandler.is_enabled()); "
            "apply_job_settings({'PYTHONUNBUFFERED': '1', 'PYTHONDONTWRITEBYTECODE': '1', "
            "'PYTHONFAULTHANDLER': '1'}); "
            "print(before, (sys.stdout.line_buffering, sys.dont_write_bytecode, "
            "faulthandler.is_enabled()))")
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "(False, False, False) (True, True, True)", done.stderr


def test_the_isolated_launch_runs_the_module_as_minus_m_would(tmp_path: Path) -> None:
    # The bootstrap's usage (argv[0] is the module's file, its exit status comes through),
    # from a working directory holding a dispatch/ package that must not be the one run.
    (tmp_path / "dispatch").mkdir()
    (tmp_path / "dispatch" / "__init__.py").write_text("raise SystemExit(99)\n")
    argv = isolated_argv(sys.executable, "dispatch.fn", [], package_parent())
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env=env)
    assert done.returncode == 2 and "usage: python -m dispatch.fn" in done.stderr


def test_an_executor_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    # Issue 32, item 8: refused as call folders are, at Executor() when the folder exists,
    # else at submit, before anything is written or recorded.
    store = f"sqlite:///{tmp_path / 'record.sqlite3'}"
    open_folder = tmp_path / "everybody"
    open_folder.mkdir()
    os.chmod(open_folder, 0o777)
    with pytest.raises(UnsafeFolder, match="written by everybody and is not sticky"):
        dispatch.Executor(open_folder, store=store)
    os.chmod(open_folder, 0o1777)  # sticky, like /tmp: nobody can move our folders away
    dispatch.Executor(open_folder, store=store)
    (tmp_path / "file").write_text("")
    with pytest.raises(UnsafeFolder, match="not a directory"):
        dispatch.Executor(tmp_path / "file", store=store)
    if os.getuid() != 0:
        return  # only root can make a folder of another user here
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(UnsafeFolder, match="owned by another user"):
        dispatch.Executor(theirs, store=store)
    link = tmp_path / "link"
    os.symlink(tmp_path / "ours-later", link)
    os.lchown(link, 65534, 65534)
    (tmp_path / "ours-later").mkdir()
    with pytest.raises(UnsafeFolder, match="is a link owned by another user"):
        dispatch.Executor(link, store=store)
    later = tmp_path / "later"
    ex = dispatch.Executor(later, store=store)  # absent: made at submit, as ours
    later.mkdir()
    os.chown(later, 65534, 65534)
    with pytest.raises(UnsafeFolder, match="owned by another user"):
        ex.submit(divmod, 7, 2)
    assert os.listdir(later) == []
    assert dispatch.jobs(all=True, store=store) == []


def test_call_files_are_private_and_links_are_refused(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "calls" / "one")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    names = Names(folder, "j1")
    write_file(names.result(1), pickle.dumps(42))
    assert stat.S_IMODE(os.stat(names.result(1)).st_mode) == 0o600
    assert read_pickle(names.result(1), 100) == (True, 42)
    assert read_pickle(names.result(2), 100) == (False, None)
    (tmp_path / "elsewhere.pkl").write_bytes(pickle.dumps(1))
    os.symlink(tmp_path / "elsewhere.pkl", names.result(3))
    with pytest.raises(UnsafeFolder, match="symbolic link"):
        read_pickle(names.result(3), 100)
    os.chmod(folder, 0o755)
    with pytest.raises(UnsafeFolder, match="not ours alone"):
        read_pickle(names.result(1), 100)


def test_the_distributed_environment_from_slurm() -> None:
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0",
           "SLURM_JOB_NODELIST": "gpu[07-10],cpu1", "SLURM_JOB_ID": "12345",
           "SLURM_NTASKS_PER_NODE": "1(x4)"}
    assert distributed_environment(env) == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "gpu07", "MASTER_PORT": str(20_000 + 12345)}
    assert distributed_environment({"RANK": "1", "WORLD_SIZE": "2"}) == {}
    assert distributed_environment({})["WORLD_SIZE"] == "1"
    assert [first_host(x) for x in ("n1", "n[2-3]", "a,b", "r[1,4]x")] == ["n1", "n2", "a",
                                                                          "r1x"]


def test_checkpoint_hooks() -> None:
    class Job(dispatch.Checkpointable):
        def __call__(self, x: int) -> int:
            return x

    class Hooked:
        def __call__(self) -> None:
            pass

        def __dispatch_checkpoint__(self) -> Call:
            return Call(print)

    job = Job()
    hook = checkpoint_hook(job)
    assert hook is not None and hook(5) == Call(job, (5,), {})
    assert checkpoint_hook(Hooked()) is not None
    assert checkpoint_hook(print) is None


def test_the_package_shows_the_executor() -> None:
    names = dir(dispatch)
    for name in ("Executor", "Checkpointable", "Call", "FunctionJob", "FunctionFailed"):
        assert name in names and name in dispatch.__all__
    text = pydoc.render_doc(dispatch, renderer=pydoc.plaintext)
    assert "class Executor" in text and "class Checkpointable" in text
    # tab completion (rlcompleter, as the interactive interpreter uses it)
    done = subprocess.run([sys.executable, "-c",
                           "import rlcompleter, dispatch; c = rlcompleter.Completer("
                           "{'dispatch': dispatch}); print(c.complete('dispatch.Executo', 0))"],
                          capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "dispatch.Executor("


def test_on_kubeflow_the_pod_runs_its_images_python_and_knows_its_job(tmp_path: Path) -> None:
    from dispatch.backends.base import Submission
    from dispatch.backends.kubeflow.manifest import build_trainjob

    ex = dispatch.Executor(tmp_path, backend="kubeflow", nodes=2,
                           kubeflow={"runtime": "torch-distributed"})
    spec = ex._spec(tmp_path / "c", "f")
    assert spec.command == ("python", "-I", "-m", "dispatch.fn", str(tmp_path / "c"))
    manifest = build_trainjob(Submission(job_id="j1", number=2, token="j1.2", spec=spec,
                                         gated=False), "default")
    env = {e["name"]: e["value"] for e in manifest["spec"]["trainer"]["env"]}
    assert env["DISPATCH_JOB_ID"] == "j1" and env["DISPATCH_SUBMISSION"] == "2"
