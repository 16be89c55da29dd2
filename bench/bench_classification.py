"""What dispatch, TorchX and submitit report for real failures on the Slurm testbed.
A benchmark, not a test: it asserts nothing; it prints a table of right and wrong.

    scripts/slurm-testbed up
    PYTHONPATH=src /tmp/bench-venv/bin/python bench/bench_classification.py

Eight scenarios run side by side on the four nodes, each one a dispatch job (its Supervisor
ticks every POLL seconds) whose Slurm job is also asked about by TorchX
(``SlurmScheduler.describe``) and submitit (``SlurmJob.watcher``). Each scenario knows its
ground truth because it causes it: preempted (a --exclusive job on ``high`` takes the node of
a --exclusive job on ``low``), node-lost (``scontrol update state=down``, then resume),
out-of-memory (--mem 100M, a process that allocates 400 MiB), time-limit (--time 1),
exit code 3, cancelled by a person (scancel), requeued (scontrol requeue; the job is
requeueable), held (scontrol hold of a pending job). All three are asked at the same moment:
once Slurm shows the event and dispatch has ticked once more.

Grading (against the scenario's truth): dispatch is right when its status cause kind is the
truth (and the exit code is 3 for exit 3). A peer is right when its answer names the truth in
Slurm's words (PREEMPTED, NODE_FAIL, OUT_OF_MEMORY, TIMEOUT, FAILED, CANCELLED, REQUEUED,
held); an answer that only says the job failed or is pending is wrong for that purpose, and an
exception is reported as such. Every job is named bench-cls-... and cancelled at the end.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import slurm_bench as sb  # noqa: E402

SLEEP = ["sleep", "600"]
REQUEUE_POLICY = {"rules": [{"on": ["requeued"], "action": "requeue", "budget": 3}]}


def squeue_state(ref: str) -> tuple[str, str]:
    out = sb.sh("squeue", "-h", "-j", ref, "-o", "%T|%r", check=False).strip()
    state, _, reason = out.partition("|")
    return state, reason


def sacct_has(word: str, steps: bool = False) -> Callable[[str], bool]:
    """Slurm recorded the word for the job (or, with steps, for one of its steps: an OOM
    killed in the srun step shows on the step row; the job row says FAILED 1:0)."""
    return lambda ref: any(r["State"].startswith(word) for r in sb.sacct_rows(ref, steps))


def running(ref: str) -> bool:
    return squeue_state(ref)[0] == "RUNNING"


def pending(ref: str) -> bool:
    return squeue_state(ref)[0] == "PENDING"


def held(ref: str) -> bool:
    return squeue_state(ref)[1] in ("JobHeldUser", "JobHeldAdmin")


@dataclass
class Scenario:
    name: str
    command: list[str]
    spec: dict[str, Any]
    truth_kind: str  # dispatch CauseKind value
    words: tuple[str, ...]  # what a peer must say to name it
    ready: Callable[[str], bool]
    trigger_when: Callable[[str], bool] | None = None
    trigger: Callable[[str], None] | None = None
    after: Callable[[], None] | None = None
    job_id: str = ""
    ref: str = ""
    triggered: bool = False
    observed: dict[str, str] = field(default_factory=dict)
    grade: dict[str, str] = field(default_factory=dict)


def preempt(ref: str) -> None:
    sb.sh("sbatch", "--parsable", "--job-name=bench-cls-preemptor", "--partition=high",
          "--exclusive", "--nodelist=n1", "--mem=100M", "--time=2", "--output=/dev/null",
          "--wrap", "sleep 20")


def node_down(ref: str) -> None:
    sb.sh("scontrol", "update", "nodename=n2", "state=down", "reason=bench")


def node_resume() -> None:
    sb.sh("scontrol", "update", "nodename=n2", "state=resume", check=False)


def scenarios() -> list[Scenario]:
    small = {"memory": "100M"}
    return [
        Scenario("time-limit", SLEEP, {**small, "time_limit": "1m", "slurm": {"nodelist": "n4"}},
                 "time-limit", ("TIMEOUT",), sacct_has("TIMEOUT")),
        Scenario("preempted", SLEEP, {**small, "slurm": {"nodelist": "n1", "exclusive": True}},
                 "preempted", ("PREEMPTED",), sacct_has("PREEMPTED"), running, preempt),
        Scenario("node-lost", SLEEP, {**small, "slurm": {"nodelist": "n2"}},
                 "node-lost", ("NODE_FAIL",), sacct_has("NODE_FAIL"), running, node_down,
                 node_resume),
        Scenario("out-of-memory",
                 ["python3", "-c", "x = bytearray(400 * 1024 * 1024); import time; "
                  "time.sleep(5)"], {**small, "slurm": {"nodelist": "n3"}},
                 "out-of-memory", ("OUT_OF_MEMORY",), sacct_has("OUT_OF_MEMORY", steps=True)),
        Scenario("exit code 3", ["bash", "-c", "exit 3"], {**small, "slurm": {"nodelist": "n3"}},
                 "non-zero-exit", ("FAILED",), sacct_has("FAILED")),
        Scenario("cancelled by a person", SLEEP, {**small, "slurm": {"nodelist": "n3"}},
                 "cancelled", ("CANCELLED",), sacct_has("CANCELLED"), running,
                 lambda ref: sb.sh("scancel", ref)),
        Scenario("requeued (scontrol requeue)", SLEEP,
                 {**small, "policy": REQUEUE_POLICY, "slurm": {"nodelist": "n3"}},
                 "requeued", ("REQUEUED",), sacct_has("REQUEUED"), running,
                 lambda ref: sb.sh("scontrol", "requeue", ref)),
        Scenario("held (scontrol hold)", SLEEP,
                 {**small, "slurm": {"nodelist": "n3", "extra": ["--begin=now+600"]}},
                 "held", ("held", "HELD", "JobHeld"), held, pending,
                 lambda ref: sb.sh("scontrol", "hold", ref)),
    ]


def dispatch_words(status: Any) -> str:
    c = status.cause
    if c is None:
        return f"{status.state.value}, no cause"
    bits = [f"{status.state.value}, cause {c.kind.value} ({c.provenance.value}"
            + (f", actor {c.actor}" if c.actor else "") + ")"]
    if c.exit_code is not None:
        bits.append(f"exit {c.exit_code}")
    if c.detail:
        bits.append(f"detail {c.detail!r}")
    return "; ".join(bits)


def observe(sc: Scenario, rig: sb.DispatchRig, tx: Any, st: Any) -> None:
    status = rig.status(sc.job_id)
    sc.observed["dispatch"] = dispatch_words(status)
    right = status.cause is not None and status.cause.kind.value == sc.truth_kind
    if sc.truth_kind == "non-zero-exit":
        right = right and status.cause is not None and status.cause.exit_code == 3
    sc.grade["dispatch"] = "right" if right else "wrong"
    for peer, key in ((tx, "TorchX"), (st, "submitit")):
        if isinstance(peer, str):
            sc.observed[key] = peer
            sc.grade[key] = "not run"
            continue
        answer = peer.refresh([sc.ref])[sc.ref]
        sc.observed[key] = answer
        if answer.startswith("error:"):
            sc.grade[key] = "error"
        else:
            sc.grade[key] = "right" if any(w in answer for w in sc.words) else "wrong"
    if sc.truth_kind == "non-zero-exit":
        for key in ("TorchX", "submitit"):
            if sc.grade.get(key) == "right" and "3" not in sc.observed[key].split("msg=")[-1]:
                sc.grade[key] = "right, no exit code"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--poll", type=float, default=2.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--only", nargs="*", default=None,
                    help="run only the scenarios whose name starts with these words")
    args = ap.parse_args()
    sb.cleanup("bench-cls-")
    work = Path(tempfile.mkdtemp(prefix="dispatch-bench-cls-"))
    rig = sb.dispatch_rig(work)
    try:
        tx: Any = sb.TorchXStatus()
    except Exception as err:  # noqa: BLE001
        tx = f"not run: {type(err).__name__}: {err}"
    try:
        st: Any = sb.SubmititStatus(work / "submitit")
    except Exception as err:  # noqa: BLE001
        st = f"not run: {type(err).__name__}: {err}"
    scs = [s for s in scenarios()
           if args.only is None or any(s.name.startswith(w) for w in args.only)]
    for sc in scs:
        # TorchX parses a job name as <role>-<replica id>: name ours the way it names its own.
        sc.job_id = rig.add_job(f"bench-cls-{sc.name.split()[0]}-0", sc.command, **sc.spec)
    started = time.monotonic()
    try:
        while time.monotonic() - started < args.timeout and any(not s.observed for s in scs):
            rig.supervisor.tick()
            for sc in scs:
                if sc.observed:
                    continue
                if not sc.ref:
                    refs = rig.refs(sc.job_id)
                    if not refs:
                        continue
                    sc.ref = refs[0]
                if sc.trigger and not sc.triggered:
                    assert sc.trigger_when is not None
                    if sc.trigger_when(sc.ref):
                        sc.trigger(sc.ref)
                        sc.triggered = True
                        print(f"{sc.name}: triggered on {sc.ref}", file=sys.stderr)
                    continue
                if sc.ready(sc.ref):
                    rig.supervisor.tick()  # dispatch looks once after Slurm shows it
                    observe(sc, rig, tx, st)
                    print(f"{sc.name}: {sc.grade}", file=sys.stderr)
                    if sc.after:
                        sc.after()
            time.sleep(args.poll)
    finally:
        node_resume()
        sb.cleanup("bench-cls-")
    print("### bench_classification: what each tool reports for real failures")
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {platform.node()} "
          f"{platform.machine()}, Python {platform.python_version()}; {sb.slurm_version()}; "
          + ", ".join(f"{k} {v}" for k, v in sb.peer_versions().items()))
    print(f"command: PYTHONPATH=src {sys.executable} bench/bench_classification.py "
          + " ".join(sys.argv[1:]))
    print()
    print("| scenario (truth) | dispatch | TorchX | submitit |")
    print("| --- | --- | --- | --- |")
    totals = {"dispatch": 0, "TorchX": 0, "submitit": 0}
    for sc in scs:
        cells = []
        for key in ("dispatch", "TorchX", "submitit"):
            if not sc.observed:
                cells.append("not observed (timed out)")
                continue
            g = sc.grade[key]
            totals[key] += g.startswith("right")
            cells.append(f"**{g}**: {sc.observed[key]}".replace("|", "\\|"))
        print(f"| {sc.name} ({sc.truth_kind}) | " + " | ".join(cells) + " |")
    print(f"| **right** | {totals['dispatch']}/{len(scs)} | {totals['TorchX']}/{len(scs)} "
          f"| {totals['submitit']}/{len(scs)} |")


if __name__ == "__main__":
    main()
