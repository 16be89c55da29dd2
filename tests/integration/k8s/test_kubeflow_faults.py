"""Issue 35's faults on the real control plane: the API server restarted under dispatch's
watches, and the controllers killed and restarted mid-job. The informer recovers; the job's
end is read once, right, and nothing is submitted twice."""

from __future__ import annotations

import json
import subprocess

import pytest
from k8s_helpers import TESTBED
from test_kubeflow_real import DISPATCH_RUNTIME, RESUBMIT, kind, spec
from tests.e2e.conftest import Dispatch


@pytest.mark.parametrize("components", [
    ("kube-apiserver",),
    ("trainer", "jobset", "kube-controller-manager"),
], ids=["apiserver", "controllers"])
def test_a_restart_mid_job_loses_nothing_and_submits_once(
        cli: Dispatch, namespace: str, components: tuple[str, ...]) -> None:
    name = "fault-" + components[0].split("-")[-1]
    proc = cli.spawn("run", str(spec(cli, namespace, name, {"DISPATCH_TESTBED_SECONDS": "25"},
                                     runtime=DISPATCH_RUNTIME, policy=RESUBMIT)),
                     "--json", "--poll", "0.5")
    cli.wait_for(name, lambda s: s["state"] == "running" and bool(s["objects"]), timeout=120)
    subprocess.run([str(TESTBED), "restart", *components], check=True, timeout=180)
    out, err = proc.communicate(timeout=240)
    final = json.loads(out)
    assert final["state"] == "succeeded" and kind(final) == "none", (final, err[-2000:])
    assert final["submissions"] == 1
    assert not [h for h in final["history"] if h["state"] == "recovering"]
