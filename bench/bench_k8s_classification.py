"""What dispatch and the Kubeflow SDK 0.5.0 report for issue 35's scenarios 1-10, caused on
the real control plane of ``scripts/k8s-testbed`` (Kubernetes v1.36.3, JobSet v0.12.0, Trainer
v2.3.0, KWOK). A benchmark, not a test: it asserts nothing; it prints a table of right and
wrong, as bench_classification.py does for TorchX and submitit on Slurm.

    (the testbed and the SDK's venv as in bench_k8s_cost.py's docstring)
    .venv/bin/python bench/bench_k8s_classification.py

Each scenario is one dispatch job (a SQLite record, the real KubeflowBackend and its informer,
a Supervisor ticking every POLL seconds, no policy rules) whose TrainJob is also asked about by
the SDK (``TrainerClient.get_job``: its status and each step's pod phase). Each knows its truth
because it causes it (the testbed's pod stages do what the job's env says,
scripts/k8s-testbed.d/pod-stages.yaml); both are asked at the same moment, once the cluster
itself shows the event (a TrainJob condition, a pod's waiting reason or condition, a Node's
Ready Unknown) and dispatch has ticked once more. Scenarios that disturb other pods (a
preemption, a lost node) run after the others, one at a time.

Grading: dispatch is right when its cause kind is the truth (exit code 3 for exit 3; the
scheduler's words for a pod that cannot be placed; the application's message for scenario 10).
The SDK is right when its answer names the truth (``Complete`` for success, ``Failed`` for an
exit code, graded "right, no exit code" as the Slurm table does, the reason's words otherwise);
an exception is reported as such. A person's suspend is shown, not graded (docs/kubeflow.md
does not say what it is). A TrainJob the webhooks reject never exists, so the SDK is not asked.
"""

from __future__ import annotations

import argparse
import json
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

import k8s_bench as kb  # noqa: E402

from dispatch.backends.registry import traits  # noqa: E402
from dispatch.core.spec import SpecError, parse_spec  # noqa: E402

LOW = "dispatch-torch"  # the testbed's runtime: restartPolicy Never, backoffLimit 0, low prio
LONG = {"DISPATCH_TESTBED_SECONDS": "600"}
Check = Callable[[dict[str, Any]], bool]  # on the TrainJob's cluster view


def view(ref: str) -> dict[str, Any]:
    """The TrainJob (None when gone) and its pods, as the admin sees them."""
    name = ref.split("/")[-1]
    tj = kb.kubectl("get", "trainjob", name, "-n", kb.NAMESPACE, "-o", "json", check=False)
    pods = kb.kubectl(
        "get",
        "pods",
        "-n",
        kb.NAMESPACE,
        "-o",
        "json",
        "-l",
        f"jobset.sigs.k8s.io/jobset-name={name}",
    )
    return {"tj": json.loads(tj) if tj.strip() else None, "pods": json.loads(pods)["items"]}


def condition(kind: str) -> Check:
    return lambda v: (
        v["tj"] is not None
        and any(
            c.get("type") == kind and c.get("status") == "True"
            for c in v["tj"].get("status", {}).get("conditions", [])
        )
    )


def waiting(reason: str) -> Check:
    return lambda v: any(
        reason in json.dumps(p.get("status", {}).get("containerStatuses", [])) for p in v["pods"]
    )


def pod_condition(kind: str, reason: str) -> Check:
    return lambda v: any(
        c.get("type") == kind and c.get("reason") == reason
        for p in v["pods"]
        for c in p.get("status", {}).get("conditions", [])
    )


def any_of(*checks: Check) -> Check:
    return lambda v: any(c(v) for c in checks)


def running(v: dict[str, Any]) -> bool:
    return bool(v["pods"]) and all(p.get("status", {}).get("phase") == "Running" for p in v["pods"])


def gone(v: dict[str, Any]) -> bool:
    return v["tj"] is None


def node_of(v: dict[str, Any]) -> str:
    return str(v["pods"][0]["spec"]["nodeName"])


def node_unknown(node: str) -> bool:
    out = kb.kubectl(
        "get",
        "node",
        node,
        "-o",
        'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
        check=False,
    )
    return out.strip() == "Unknown"


@dataclass
class Scenario:
    name: str
    env: dict[str, str]
    truth: str  # dispatch's cause kind (or "succeeded", "shown")
    words: tuple[str, ...]  # what the SDK must say to name it
    ready: Check
    spec: dict[str, Any] = field(default_factory=dict)
    trigger: Callable[[str, dict[str, Any]], None] | None = None  # once running
    after: Callable[[], None] | None = None
    phase: int = 0  # scenarios of a later phase start when the earlier ones are observed
    job_id: str = ""
    ref: str = ""
    triggered: bool = False
    node: str = ""
    observed: dict[str, str] = field(default_factory=dict)
    grade: dict[str, str] = field(default_factory=dict)


def lose(sc: Scenario) -> Callable[[str, dict[str, Any]], None]:
    def go(ref: str, v: dict[str, Any]) -> None:
        sc.node = node_of(v)
        kb.testbed("lose-node", sc.node)

    return go


def preempt(ref: str, v: dict[str, Any]) -> None:
    node = node_of(v)
    kb.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "bench-hog", "namespace": kb.NAMESPACE},
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": "dispatch-testbed-high",
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "env": [{"name": "DISPATCH_TESTBED_SECONDS", "value": "600"}],
                            "resources": {"requests": {"cpu": "8"}},
                        }
                    ],
                },
            }
        ),
    )


def scenarios() -> list[Scenario]:
    cpu8 = {"kubeflow": {"resourcesPerNode": {"requests": {"cpu": "8"}}}, "runtime": LOW}
    lost = Scenario(
        "5 lost node",
        LONG,
        "node-lost",
        ("lost", "Unreachable", "NodeLost"),
        lambda v: False,
        spec=cpu8,
        phase=2,
    )
    lost.ready = lambda v: bool(lost.node) and node_unknown(lost.node)
    lost.trigger = lose(lost)
    lost.after = lambda: kb.testbed("restore-node", lost.node) if lost.node else None
    return [
        Scenario(
            "1 success",
            {"DISPATCH_TESTBED_SECONDS": "2"},
            "succeeded",
            ("Complete",),
            condition("Complete"),
        ),
        Scenario(
            "2 exit 3 (stock runtime), crash loop",
            {"DISPATCH_TESTBED_SECONDS": "1", "DISPATCH_TESTBED_EXIT": "3"},
            "crash-loop",
            ("CrashLoopBackOff",),
            waiting("CrashLoopBackOff"),
        ),
        Scenario(
            "2 exit 3 (stock runtime), ended",
            {"DISPATCH_TESTBED_SECONDS": "1", "DISPATCH_TESTBED_EXIT": "3"},
            "non-zero-exit",
            ("Failed",),
            condition("Failed"),
        ),
        Scenario(
            "3 OOMKilled",
            {"DISPATCH_TESTBED_SECONDS": "1", "DISPATCH_TESTBED_OOM": "1"},
            "out-of-memory",
            ("OOM",),
            condition("Failed"),
            spec={"runtime": LOW},
        ),
        Scenario(
            "4 preempted by a higher priority",
            LONG,
            "preempted",
            ("Preempt",),
            # the victim may be gone before a look sees its condition; then its Job fails
            any_of(pod_condition("DisruptionTarget", "PreemptionByScheduler"), condition("Failed")),
            spec=cpu8,
            trigger=preempt,
            phase=1,
            after=lambda: (
                kb.kubectl(
                    "delete", "pod", "bench-hog", "-n", kb.NAMESPACE, "--wait=false", check=False
                )
                and None
            ),
        ),
        lost,
        Scenario(
            "6 time limit",
            LONG,
            "time-limit",
            ("Deadline", "time limit"),
            condition("Failed"),
            spec={"runtime": LOW, "time_limit": "6s"},
        ),
        Scenario(
            "7 a person deletes the TrainJob",
            LONG,
            "cancelled",
            ("Delet", "cancel"),
            gone,
            spec={"runtime": LOW},
            trigger=lambda ref, v: (
                kb.kubectl(
                    "delete", "trainjob", ref.split("/")[-1], "-n", kb.NAMESPACE, "--wait=false"
                )
                and None
            ),
        ),
        Scenario(
            "7 a person suspends the TrainJob",
            LONG,
            "shown",
            ("Suspend",),
            condition("Suspended"),
            spec={"runtime": LOW},
            trigger=lambda ref, v: (
                kb.kubectl(
                    "patch",
                    "trainjob",
                    ref.split("/")[-1],
                    "-n",
                    kb.NAMESPACE,
                    "--type=merge",
                    "-p",
                    '{"spec":{"suspend":true}}',
                )
                and None
            ),
        ),
        Scenario(
            "8 more nodes than the cluster has",
            {},
            "Unschedulable",
            ("Unschedulable",),
            pod_condition("PodScheduled", "Unschedulable"),
            spec={
                "nodes": 5,
                "runtime": LOW,
                "kubeflow": {"resourcesPerNode": {"requests": {"cpu": "9"}}},
            },
        ),
        Scenario(
            "9 an image error",
            {"DISPATCH_TESTBED_IMAGE_ERROR": "1"},
            "launch-failed",
            ("ErrImagePull", "Image"),
            waiting("ErrImagePull"),
            spec={"runtime": LOW},
        ),
        Scenario(
            "9 a container-creation error",
            {"DISPATCH_TESTBED_IMAGE_ERROR": "CreateContainerError"},
            "launch-failed",
            ("CreateContainerError",),
            waiting("CreateContainerError"),
            spec={"runtime": LOW},
        ),
        Scenario(
            "10 the application's message (exit 1)",
            {
                "DISPATCH_TESTBED_SECONDS": "1",
                "DISPATCH_TESTBED_EXIT": "1",
                "DISPATCH_TESTBED_MESSAGE": "loss is nan at step 7",
            },
            "message",
            ("loss is nan",),
            condition("Failed"),
            spec={"runtime": LOW},
        ),
    ]


def grade_dispatch(sc: Scenario, st: Any) -> str:
    c = st.cause
    words = kb.dispatch_words(st)
    if sc.truth == "shown":
        return "shown"
    if sc.truth == "succeeded":
        ok = st.state.value == "succeeded"
    elif sc.truth == "crash-loop":
        ok = "CrashLoopBackOff" in words or (c is not None and c.kind.value == "non-zero-exit")
    elif sc.truth == "Unschedulable":
        ok = st.state.value == "pending" and "Unschedulable" in words
    elif sc.truth == "message":
        ok = "loss is nan" in words
    else:
        ok = c is not None and c.kind.value == sc.truth
        if sc.truth == "non-zero-exit":
            ok = ok and c is not None and c.exit_code == 3
    return "right" if ok else "wrong"


def grade_sdk(sc: Scenario, answer: str) -> str:
    if sc.truth == "shown":
        return "shown"
    if answer.startswith("error:"):
        return "error"
    if not any(w in answer for w in sc.words):
        return "wrong"
    return "right, no exit code" if sc.truth == "non-zero-exit" else "right"


def observe(sc: Scenario, rig: kb.DispatchRig, peer: kb.SdkPeer) -> None:
    rig.supervisor.tick()  # dispatch looks once after the cluster shows it
    st = rig.status(sc.job_id)
    answer = peer.ask("get " + sc.ref.split("/")[-1])["jobs"]
    sdk = next(iter(answer.values()))
    sc.observed = {"dispatch": kb.dispatch_words(st), "SDK": sdk}
    sc.grade = {"dispatch": grade_dispatch(sc, st), "SDK": grade_sdk(sc, sdk)}


def webhook_row(rig: kb.DispatchRig) -> str:
    data = {
        "name": "cls-nort",
        "backend": "kubeflow",
        "command": ["python", "train.py"],
        "kubeflow": {"namespace": kb.NAMESPACE, "runtime": "no-such-runtime"},
    }
    try:
        rig.backend.inner.admit(parse_spec(data, "<cls-nort>", backends=traits()))
        words, grade = "admitted", "wrong"
    except SpecError as err:
        words, grade = f"bad input at submit (exit 2): {str(err)[:200]}", "right"
    cell = f"**{grade}**: {words}".replace("|", "\\|")
    return (
        f"| 9 a TrainJob the webhooks reject (bad input at submit) | {cell} | **not asked**: "
        "never created; `train()` reads the runtime first (`get_runtime` raises) |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--poll", type=float, default=2.0)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="run only the scenarios whose name starts with these words",
    )
    args = ap.parse_args()
    kb.kubectl(
        "delete",
        "trainjobs",
        "-n",
        kb.NAMESPACE,
        "-l",
        "dispatch.io/managed=true",
        "--wait=true",
        check=False,
    )
    rig = kb.dispatch_rig(
        Path(tempfile.mkdtemp(prefix="dispatch-bench-k8s-cls-")), node_loss_window_s=90
    )
    peer = kb.SdkPeer()
    scs = [
        s for s in scenarios() if args.only is None or any(s.name.startswith(w) for w in args.only)
    ]
    started = time.monotonic()
    phase = 0
    try:
        while time.monotonic() - started < args.timeout and any(not s.observed for s in scs):
            if all(s.observed for s in scs if s.phase <= phase):
                phase += 1
            for sc in scs:
                if sc.phase <= phase and not sc.job_id:
                    spec = dict(sc.spec)
                    sc.job_id = rig.add_job(
                        f"cls-{sc.name.split()[0]}-{scs.index(sc)}", sc.env, **spec
                    )
            rig.supervisor.tick()
            for sc in scs:
                if sc.observed or not sc.job_id:
                    continue
                if not sc.ref:
                    refs = rig.refs(sc.job_id)
                    if not refs:
                        continue
                    sc.ref = refs[0]
                v = view(sc.ref)
                if sc.trigger and not sc.triggered:
                    if running(v):
                        sc.trigger(sc.ref, v)
                        sc.triggered = True
                        print(f"{sc.name}: triggered on {sc.ref}", file=sys.stderr)
                    continue
                if sc.ready(v):
                    observe(sc, rig, peer)
                    print(f"{sc.name}: {sc.grade}", file=sys.stderr)
                    if sc.after:
                        sc.after()
            time.sleep(args.poll)
        nort = webhook_row(rig)
    finally:
        for sc in scs:
            if sc.after and not sc.observed:
                sc.after()
        peer.close()
        rig.close()
        kb.kubectl(
            "delete",
            "trainjobs",
            "-n",
            kb.NAMESPACE,
            "-l",
            "dispatch.io/managed=true",
            "--wait=false",
            check=False,
        )
    print("### bench_k8s_classification: what each tool reports for issue 35's scenarios")
    print(
        f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {platform.node()} "
        f"{platform.machine()}, Python {platform.python_version()}; Kubernetes v1.36.3, "
        f"JobSet v0.12.0, Trainer v2.3.0, KWOK v0.8.0; kubeflow SDK {kb.sdk_version()}"
    )
    print(f"command: {sys.executable} bench/bench_k8s_classification.py " + " ".join(sys.argv[1:]))
    print()
    print("| scenario (truth) | dispatch | Kubeflow SDK 0.5.0 (`get_job`) |")
    print("| --- | --- | --- |")
    totals = {"dispatch": 0, "SDK": 0}
    graded = 1  # the webhook row
    totals["dispatch"] += "**right**" in nort
    for sc in scs:
        cells = []
        graded += sc.truth != "shown"
        for key in ("dispatch", "SDK"):
            if not sc.observed:
                cells.append("not observed (timed out)")
                continue
            g = sc.grade[key]
            totals[key] += g.startswith("right")
            said = " ".join(sc.observed[key].split())  # one table row: no newlines
            cells.append(f"**{g}**: {said}".replace("|", "\\|"))
        print(f"| {sc.name} ({sc.truth}) | " + " | ".join(cells) + " |")
    print(nort)
    print(
        f"| **right** | {totals['dispatch']}/{graded} | {totals['SDK']}/{graded - 1} "
        "(the SDK not asked for the rejected one) |"
    )


if __name__ == "__main__":
    main()
