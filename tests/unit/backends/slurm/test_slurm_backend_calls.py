"""SlurmBackend's shell logic against recorded tool output (no Slurm): how many squeue / sacct /
sinfo calls a discover() makes (P2), caching of ended jobs, finding objects by token, and
SchedulerUnreachable / SubmitRejected from the tools' own words."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dispatch.backends.base import Submission, SubmitRejected
from dispatch.backends.slurm.backend import SlurmBackend
from dispatch.backends.slurm.parse import SACCT_FIELDS
from dispatch.backends.slurm.tools import Result, SlurmCommandError
from dispatch.core.model import CauseKind as K
from dispatch.core.model import SchedulerUnreachable
from dispatch.core.model import State as S
from dispatch.core.policy import Action
from dispatch.core.spec import JobSpec

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "slurm"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HEADER = "|".join(SACCT_FIELDS)


class FakeTools:
    """Answers each tool from a table; records every argv."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.answers: dict[str, Result | list[Result]] = {}

    def set(self, tool: str, stdout: str = "", stderr: str = "", rc: int = 0) -> None:
        self.answers[tool] = Result((tool,), rc, stdout, stderr)

    def __call__(self, argv: Sequence[str], timeout: float) -> Result:
        self.calls.append(tuple(argv))
        answer = self.answers.get(argv[0])
        if answer is None:
            raise AssertionError(f"unexpected call {argv}")
        return answer if isinstance(answer, Result) else answer.pop(0)

    def count(self, tool: str) -> int:
        return sum(1 for c in self.calls if c[0] == tool)


def backend(tools: FakeTools, tmp_path: Path) -> SlurmBackend:
    return SlurmBackend(runner=tools, clock=lambda: NOW, output_dir=tmp_path,
                        queries="json")


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def test_declarations() -> None:
    d = SlurmBackend(node_loss_window=timedelta(seconds=42)).declarations()
    assert d.backend == "slurm" and d.native_actions == frozenset({Action.REQUEUE})
    assert d.node_loss_window == timedelta(seconds=42)


def test_discover_preempted_then_steady(tmp_path: Path) -> None:
    tools = FakeTools()
    tools.set("squeue", fixture("preempted.squeue.json"))
    tools.set("sinfo", fixture("preempted.sinfo.json"))
    tools.set("sacct", fixture("preempted.sacct-D.txt"))
    b = backend(tools, tmp_path)
    tokens = {"cap.preempt-requeue.0", "cap.preempt-norequeue.0", "cap.high.0"}
    d = b.discover(tokens, ())
    by_ref = {o.ref: o for o in d.objects}
    assert (by_ref["25"].state, by_ref["25"].cause.kind) == (S.RECOVERING, K.PREEMPTED)
    assert (by_ref["26"].state, by_ref["26"].cause.kind) == (S.FAILED, K.PREEMPTED)
    assert (by_ref["27"].state, by_ref["27"].cause.kind) == (S.RUNNING, K.NONE)
    assert by_ref["25"].token == "cap.preempt-requeue.0"
    sacct_calls = [c for c in tools.calls if c[0] == "sacct"]
    assert len(sacct_calls) == 1
    assert sacct_calls[0][-2:] == ("-j", "25,26")  # only the jobs that ended or requeued
    assert "-D" in sacct_calls[0] and "-P" in sacct_calls[0]
    # A steady tick: one squeue; no node read (the last one stands: its nodes healthy and
    # less than node_interval old), no sacct; the answers are the same.
    d2 = b.discover(tokens, ("25", "26", "27"))
    assert {o.ref: (o.state, o.cause.kind) for o in d2.objects} == {
        o.ref: (o.state, o.cause.kind) for o in d.objects}
    assert b.calls == {"squeue": 2, "sinfo": 1, "sacct": 1}


def many_jobs(n: int, ended: set[int]) -> str:
    doc = json.loads(fixture("preempt-before.squeue.json"))
    template = doc["jobs"][0]
    jobs = []
    for i in range(1, n + 1):
        job = dict(template, job_id=1000 + i, comment=f"job{i}.1")
        if i in ended:
            job.update(job_state="COMPLETED", state_reason="None")
        jobs.append(job)
    doc["jobs"] = jobs + [dict(template, job_id=5, comment="someone-else")]
    return json.dumps(doc)


def completed_rows(ids: set[int]) -> str:
    """The allocation row and its batch step, as accounting writes a finished batch job."""
    lines = [HEADER]
    for i in sorted(ids):
        lines.append(f"{1000 + i}|{1000 + i}|COMPLETED|0:0|0:0|None|2026-11-30T11:33:45|"
                     f"2026-11-30T11:33:48|2026-11-30T11:40:00|n1|low|job{i}.1")
        lines.append(f"{1000 + i}.batch|{1000 + i}.batch|COMPLETED|0:0||None|"
                     f"2026-11-30T11:33:48|2026-11-30T11:33:48|2026-11-30T11:40:00|n1||")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("n", [1, 50, 200])
def test_calls_per_discover_are_constant_in_n(n: int, tmp_path: Path) -> None:
    tools = FakeTools()
    tools.set("sinfo", fixture("idle.sinfo.json"))
    tools.set("squeue", many_jobs(n, set()))
    clock = [NOW]
    b = SlurmBackend(runner=tools, clock=lambda: clock[0], output_dir=tmp_path, queries="json")
    tokens = {f"job{i}.1" for i in range(1, n + 1)}
    d = b.discover(tokens, ())
    assert len(d.objects) == n and all(o.state is S.RUNNING for o in d.objects)
    assert b.calls == {"squeue": 1, "sinfo": 1}  # nothing ended: no sacct at all
    ended = set(range(1, n + 1, 7))
    tools.set("squeue", many_jobs(n, ended))
    tools.set("sacct", completed_rows(ended))
    clock[0] += b.node_interval  # each tick a node read is due: still one, whatever n
    d = b.discover(tokens, [o.ref for o in d.objects])
    live = len(ended) < n  # a job still running holds nodes (n = 1: the one job ended)
    assert b.calls == {"squeue": 2, "sinfo": 1 + live, "sacct": 1}
    (sacct,) = [c for c in tools.calls if c[0] == "sacct"]
    assert sacct[-1] == ",".join(str(1000 + i) for i in sorted(ended))
    assert sum(o.state is S.SUCCEEDED for o in d.objects) == len(ended)
    clock[0] += b.node_interval
    b.discover(tokens, [o.ref for o in d.objects])  # steady again: cached, no sacct
    assert b.calls == {"squeue": 3, "sinfo": 1 + 2 * live, "sacct": 1}


def test_token_found_in_accounting_after_squeue_forgot(tmp_path: Path) -> None:
    """A new backend instance (the supervisor crashed) is asked for a token whose job has
    left squeue: one sacct over a time window finds it by its comment."""
    tools = FakeTools()
    tools.set("squeue", json.dumps({"meta": {}, "errors": [], "jobs": []}))
    tools.set("sinfo", fixture("idle.sinfo.json"))
    tools.set("sacct", fixture("exit3.sacct-D.txt"))
    b = backend(tools, tmp_path)
    d = b.discover({"cap.exit3.0", "never.1"}, ())
    (obj,) = d.objects
    assert (obj.ref, obj.token, obj.state, obj.cause.kind) == ("20", "cap.exit3.0", S.FAILED,
                                                              K.NON_ZERO_EXIT)
    (sacct,) = [c for c in tools.calls if c[0] == "sacct"]
    assert "-S" in sacct and "-j" not in sacct
    b.discover({"cap.exit3.0", "never.1"}, ("20",))  # found, cached; never.1 searched once
    assert b.calls["sacct"] == 1


def test_unknown_ref_is_left_out_of_an_incomplete_look(tmp_path: Path) -> None:
    tools = FakeTools()
    tools.set("squeue", json.dumps({"jobs": []}))
    tools.set("sinfo", fixture("idle.sinfo.json"))
    tools.set("sacct", HEADER + "\n")
    d = backend(tools, tmp_path).discover((), ("999",))
    assert d.objects == () and not d.complete  # silence, never an end (S16)


def test_squeue_errors_with_exit_0_are_unreachable(tmp_path: Path) -> None:
    text = fixture("unreachable.squeue.txt")
    tools = FakeTools()
    tools.set("squeue", text[: text.rindex("}") + 1])
    tools.set("sinfo", fixture("idle.sinfo.json"))
    with pytest.raises(SchedulerUnreachable, match="slurm_load_jobs"):
        backend(tools, tmp_path).discover({"a.1"}, ())


@pytest.mark.parametrize("tool", ["squeue", "sinfo", "sacct"])
def test_tool_failures_are_unreachable(tool: str, tmp_path: Path) -> None:
    tools = FakeTools()
    # a running job (so its nodes are read) and an ended one (so accounting is asked)
    running = json.loads(fixture("preempt-before.squeue.json"))["jobs"][0]
    ended = json.loads(fixture("exit3.squeue.json"))
    ended["jobs"].append(running)
    tools.set("squeue", json.dumps(ended))
    tools.set("sinfo", fixture("idle.sinfo.json"))
    tools.set("sacct", fixture("exit3.sacct-D.txt"))
    words = {"squeue": "squeue: error: Unable to contact slurm controller (connect failure)",
             "sinfo": fixture("unreachable.sinfo.txt").splitlines()[0],
             "sacct": "sacct: error: Problem talking to the database: Connection refused"}
    tools.set(tool, stderr=words[tool], rc=1)
    with pytest.raises(SchedulerUnreachable) as err:
        backend(tools, tmp_path).discover({"cap.exit3.0", running["comment"]}, ())
    assert words[tool].split(": ", 1)[-1] in str(err.value)


def submission(gated: bool = False) -> Submission:
    return Submission(job_id="j1", number=1, token="j1.1", gated=gated,
                      spec=JobSpec(name="t", command=("true",), backend="slurm"))


def test_submit_writes_the_script_and_returns_the_id(tmp_path: Path) -> None:
    tools = FakeTools()
    tools.set("sbatch", "812;dispatch\n")
    b = backend(tools, tmp_path)
    assert b.submit(submission(gated=True)) == "812"
    (argv,) = tools.calls
    assert argv[-1] == str(tmp_path / "j1.1.sbatch") and "--hold" in argv
    assert (tmp_path / "j1.1.sbatch").read_text().startswith("#!/bin/bash")


def test_a_link_planted_at_the_scripts_name_is_replaced_never_followed(
        tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    out = tmp_path / "out"
    out.mkdir()
    (out / "j1.1.sbatch").symlink_to(victim)
    (out / "j1.1.tmp").symlink_to(victim)  # the old fixed temp name
    tools = FakeTools()
    tools.set("sbatch", "812\n")
    assert backend(tools, out).submit(submission()) == "812"
    assert victim.read_text() == "untouched"
    script = out / "j1.1.sbatch"
    assert not script.is_symlink() and script.read_text().startswith("#!/bin/bash")
    assert script.stat().st_mode & 0o777 == 0o600  # it holds the job's environment
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]  # no temp file left


def test_submit_rejected_and_unreachable(tmp_path: Path) -> None:
    tools = FakeTools()
    rejected = fixture("sbatch-rejected.stderr.txt").splitlines()[3]
    tools.set("sbatch", stderr=rejected + "\n", rc=1)
    with pytest.raises(SubmitRejected) as err:
        backend(tools, tmp_path).submit(submission())
    assert err.value.detail == rejected
    tools.set("sbatch", stderr=fixture("unreachable.sbatch.txt").splitlines()[0], rc=1)
    with pytest.raises(SchedulerUnreachable):
        backend(tools, tmp_path).submit(submission())


def test_stop_cancel_and_gate_are_idempotent(tmp_path: Path) -> None:
    tools = FakeTools()
    b = backend(tools, tmp_path)
    tools.set("scancel", stderr="scancel: error: Kill job error on job id 5: Job/step already "
              "completing or completed\n", rc=0)
    b.stop("5")
    tools.set("scancel", stderr="scancel: error: Kill job error on job id 5: Invalid job id "
              "specified\n", rc=1)
    b.cancel("5")
    tools.set("scancel", stderr=fixture("unreachable.scancel.txt").splitlines()[0], rc=1)
    with pytest.raises(SchedulerUnreachable):
        b.cancel("5")
    tools.set("scancel", stderr="scancel: error: Access/permission denied\n", rc=1)
    with pytest.raises(SlurmCommandError):
        b.cancel("5")
    tools.set("scontrol", "")
    b.open_gate("5")
    assert tools.calls[-1] == ("scontrol", "release", "5")


def test_node_lost_since_is_remembered(tmp_path: Path) -> None:
    tools = FakeTools()
    tools.set("squeue", fixture("preempt-before.squeue.json"))  # 25 RUNNING on n1
    doc = json.loads(fixture("notresponding.sinfo.json"))
    for node in doc["nodes"]:  # Slurm gave no time for the reason this time
        node["reason_changed_at"] = 0
    tools.set("sinfo", json.dumps(doc))
    clock = [NOW]
    b = SlurmBackend(runner=tools, clock=lambda: clock[0], output_dir=tmp_path,
                        queries="json")
    first = {o.ref: o for o in b.discover({"cap.preempt-requeue.0"}, ()).objects}["25"]
    assert first.cause.kind is K.NODE_LOST and first.lost_since == NOW
    clock[0] = NOW + timedelta(seconds=30)
    again = {o.ref: o for o in b.discover({"cap.preempt-requeue.0"}, ()).objects}["25"]
    assert again.lost_since == NOW  # first seen, not now
    assert "n1" in b.unhealthy_nodes() and "n2" not in b.unhealthy_nodes()
    tools.set("sinfo", fixture("idle.sinfo.json"))
    healed = {o.ref: o for o in b.discover({"cap.preempt-requeue.0"}, ()).objects}["25"]
    assert healed.cause.kind is K.NONE and healed.lost_since is None


def test_logs_from_squeue_output_path(tmp_path: Path) -> None:
    tools = FakeTools()
    tools.set("squeue", fixture("completed.squeue.json"))
    tools.set("sinfo", fixture("idle.sinfo.json"))
    tools.set("sacct", fixture("completed.sacct-D.txt"))
    b = backend(tools, tmp_path)
    b.discover({"cap.ok.0"}, ())
    assert b.logs("19") == [Path("/tmp/dispatch-slurm-capture.tu9xds/19.out")]
    (tmp_path / "j1.1.77.out").write_text("hello\n")
    assert b.logs("77") == [tmp_path / "j1.1.77.out"]


def test_a_job_neither_squeue_nor_accounting_knows_is_not_seen_never_ended(
        tmp_path: Path) -> None:
    # S16: silence is not Slurm's word. The look is incomplete, so only that job waits;
    # the jobs Slurm does show are reported as usual.
    tools = FakeTools()
    tools.set("squeue", fixture("preempted.squeue.json"))
    tools.set("sinfo", fixture("preempted.sinfo.json"))
    tools.set("sacct", fixture("preempted.sacct-D.txt"))
    d = backend(tools, tmp_path).discover((), ("27", "999999"))
    assert not d.complete
    assert d.get("999999") is None
    live = d.get("27")
    assert live is not None and live.state is S.RUNNING


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_the_compact_tick_asks_for_our_users_jobs_and_only_our_running_jobs_nodes(
        tmp_path: Path, version: str) -> None:
    """The production path (queries="compact"): one squeue of the submitting user's jobs,
    one scontrol for exactly the nodes our running job holds, no sacct while nothing ended;
    and no node query at all while none of our jobs holds nodes."""
    d = FIX / version
    nodes = (FIX if version == "22.05" else d) / "idle.scontrol-node.txt"
    tools = FakeTools()
    tools.set("squeue", (d / "released.squeue.txt").read_text())
    tools.set("scontrol", nodes.read_text())
    b = SlurmBackend(runner=tools, clock=lambda: NOW, output_dir=tmp_path, user="alice")
    running = next(line.split("|")[0] for line in (d / "released.squeue.txt").read_text()
                   .splitlines() if "|RUNNING|" in line)
    look = b.discover((), (running,))
    (obj,) = look.objects
    assert obj.state is S.RUNNING and look.complete
    assert tools.calls[0][:7] == ("squeue", "-h", "--local", "-t", "all", "-u", "alice")
    node_calls = [c for c in tools.calls if c[0] == "scontrol"]
    assert node_calls == [("scontrol", "show", "node", "-o", ",".join(obj.nodes))]
    assert dict(b.calls) == {"squeue": 1, "scontrol": 1}

    held = FakeTools()
    held.set("squeue", (d / "held-user.squeue.txt").read_text())
    hb = SlurmBackend(runner=held, clock=lambda: NOW, output_dir=tmp_path, user="alice")
    ref = (d / "held-user.squeue.txt").read_text().split("|")[0]
    hb.discover((), (ref,))
    assert dict(hb.calls) == {"squeue": 1}  # a held job holds no nodes: no node query


def _printed(path: Path) -> tuple[str, int]:
    """A capture of a tool while slurmctld was stopped: its words, then ``rc=N``."""
    *words, rc = path.read_text().splitlines()
    return "\n".join(words) + "\n", int(rc.removeprefix("rc="))


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_the_compact_tick_is_unreachable_on_the_controllers_real_words(
        tmp_path: Path, version: str) -> None:
    d = FIX / version
    tools = FakeTools()
    words, rc = _printed(d / "unreachable.squeue-compact.txt")
    tools.set("squeue", stderr=words, rc=rc)
    b = SlurmBackend(runner=tools, clock=lambda: NOW, output_dir=tmp_path, user="alice")
    with pytest.raises(SchedulerUnreachable, match="Unable to contact slurm controller"):
        b.discover((), ("90",))
    # squeue answered but the node query cannot be made: unreachable too, nothing reported
    tools.set("squeue", (d / "released.squeue.txt").read_text())
    words, rc = _printed(d / "unreachable.scontrol-node.txt")
    tools.set("scontrol", stderr=words, rc=rc)
    running = next(line.split("|")[0] for line in (d / "released.squeue.txt").read_text()
                   .splitlines() if "|RUNNING|" in line)
    with pytest.raises(SchedulerUnreachable, match="slurm_load_node"):
        b.discover((), (running,))
