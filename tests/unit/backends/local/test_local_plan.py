"""The local backend refuses what it cannot run before anything is recorded (validate), and
says what submit would do without doing it (dry_run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.specs import parse_spec

from dispatch.backends.base import Submission, SubmitRejected
from dispatch.backends.local import LocalBackend, LocalDryRun
from dispatch.core.spec import JobSpec, SpecError
from dispatch.errors import BadInput
from dispatch.support.isolated import LAUNCH, package_parent


def _spec(**fields: object) -> JobSpec:
    return parse_spec({"name": "p", "command": ["python", "train.py"], **fields})


def test_unknown_local_keys_are_refused_naming_each(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "root")
    with pytest.raises(SpecError) as err:
        backend.validate(_spec(local={"gpus": 2, "affinity": "x"}), source="train.yaml")
    assert isinstance(err.value, BadInput) and err.value.exit_code == 2
    assert err.value.where == "local.affinity"
    assert str(err.value).startswith("train.yaml: local.affinity: unknown key")
    assert "local.gpus" in str(err.value)
    # Submit refuses the same, before it makes anything.
    sub = Submission(job_id="j", number=1, token="j.1", spec=_spec(local={"gpus": 2}))
    with pytest.raises(SubmitRejected, match="local.gpus"):
        backend.submit(sub)
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize(("fields", "where"), [
    ({"workdir": "/nonexistent/dir"}, "workdir"),
    ({"command": ["python", "a\0b"]}, "command[1]"),
    ({"env": {"A=B": "x"}}, "env.'A=B'"),
    ({"env": {"A": "x\0y"}}, "env.A"),
])
def test_what_cannot_start_here_is_refused(tmp_path: Path, fields: dict[str, object],
                                           where: str) -> None:
    with pytest.raises(SpecError) as err:
        LocalBackend(tmp_path).validate(_spec(**fields))
    assert err.value.where == where


def test_a_spec_it_can_run_passes(tmp_path: Path) -> None:
    LocalBackend(tmp_path).validate(_spec(workdir=str(tmp_path), env={"A": "1"}, nodes=3))


def test_dry_run_says_what_submit_would_do_and_does_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    backend = LocalBackend(root, kill_grace=2.0, python="/usr/bin/python3")
    spec = _spec(nodes=2, workdir=str(tmp_path), env={"A": "1", "RANK": "9"},
                 time_limit="90s", memory="1G")
    plan = backend.plan(Submission(job_id="j", number=3, token="j.3", spec=spec,
                                      gated=True))
    assert isinstance(plan, LocalDryRun)
    # Isolated (-I): the runner imports dispatch from where this process did, nothing from a
    # working directory or a PYTHONPATH.
    assert plan.runner_argv == ("/usr/bin/python3", "-I", "-c", LAUNCH, package_parent(),
                                "dispatch.backends.local.runner", f"{root}/objects/<ref>")
    assert plan.argv == ("python", "train.py") and plan.nodes == 2
    assert plan.workdir == str(tmp_path)
    assert (plan.time_limit, plan.memory, plan.gated, plan.kill_grace) == (90.0, 1024**3, True,
                                                                           2.0)
    assert plan.env["A"] == "1" and plan.env["WORLD_SIZE"] == "2"
    assert plan.env["DISPATCH_JOB_ID"] == "j" and plan.env["DISPATCH_SUBMISSION"] == "3"
    assert "RANK" not in plan.env  # the spec's RANK never reaches a node
    assert [n["RANK"] for n in plan.node_env] == ["0", "1"]  # the rank dispatch gives wins
    text = plan.text()
    assert "nodes: 2 x ['python', 'train.py']" in text and "gated: yes" in text
    assert not root.exists()  # nothing was written


def test_more_nodes_than_process_ids_are_refused() -> None:
    # Every node is a process at once, beside the runner: pid_max 32768 starts 32766 nodes.
    from dispatch.backends.local.plan import spec_problems

    assert spec_problems(_spec(nodes=32766), pid_max=32768) == []
    ((where, message),) = spec_problems(_spec(nodes=40000), pid_max=32768)
    assert where == "nodes" and "kernel.pid_max is 32768" in message
    assert spec_problems(_spec(nodes=32767), pid_max=32768)[0][0] == "nodes"
    assert spec_problems(_spec(nodes=40000), pid_max=None) == []  # not known: not refused


def test_validate_reads_this_machines_pid_max(tmp_path: Path) -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    if pid_max > 100_000:
        pytest.skip(f"pid_max {pid_max} is past the spec's own bound on nodes")
    with pytest.raises(SpecError) as err:
        LocalBackend(tmp_path / "root").validate(_spec(nodes=pid_max), source="big.yaml")
    assert err.value.where == "nodes" and f"kernel.pid_max is {pid_max}" in str(err.value)


def test_a_workdir_whose_link_leads_past_name_max_is_refused_naming_it(tmp_path: Path) -> None:
    # The path itself is short (the pure check passes); the link's target holds a
    # 300-byte component, so is_dir fails with ENAMETOOLONG: refused, never a traceback.
    link = tmp_path / "work"
    link.symlink_to("/tmp/" + "a" * 300)
    with pytest.raises(SpecError) as err:
        LocalBackend(tmp_path / "root").validate(_spec(workdir=str(link)), source="w.yaml")
    assert err.value.where == "workdir" and "File name too long" in str(err.value)


def test_a_backend_that_reuses_the_local_one_says_its_own_name_in_its_dry_run(
        tmp_path: Path) -> None:
    """Issue 50 item 6: not "the local runner's plan" and "local root" for every backend
    that reuses LocalBackend."""
    class Reuser(LocalBackend):
        name = "ssh-local"

    spec = JobSpec(name="p", command=("python", "train.py"), backend="ssh-local")
    sub = Submission(job_id="j", number=1, token="j.1", spec=spec)
    dry = Reuser(tmp_path / "root").dry_run(sub)
    assert dry.backend == "ssh-local"
    ((title, text),) = dry.documents
    assert title == "the ssh-local runner's plan"
    assert text.startswith(f"ssh-local root: {tmp_path / 'root'}")
    assert "local root" not in text.replace("ssh-local root", "")
    assert Reuser(tmp_path / "root").declarations().backend == "ssh-local"
