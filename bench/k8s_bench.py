"""Shared parts of the Kubernetes benchmarks (bench_k8s_cost, bench_k8s_classification).

They run against a testbed of ``scripts/k8s-testbed`` (its own state and ports, so the suite's
testbed is left alone) with the exports of ``scripts/k8s-testbed env``. What is here:

- the API server's own counters: ``apiserver_request_total`` scraped from /metrics with the
  admin's client certificate (plain HTTPS, no kubectl: kubectl's discovery requests would be
  counted too), and the kube-apiserver process's CPU time from /proc;
- a dispatch rig: a SQLite record, the real ``KubeflowBackend`` (its informer) and a
  ``Supervisor``, as ``dispatch supervise`` runs them;
- the Kubeflow SDK peer: bench/kfsdk_peer.py in its own venv, driven line by line.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dispatch.backends.kubeflow.backend import KubeflowBackend  # noqa: E402
from dispatch.backends.registry import traits  # noqa: E402
from dispatch.core.model import Discovery  # noqa: E402
from dispatch.core.record import fold  # noqa: E402
from dispatch.core.spec import parse_spec  # noqa: E402
from dispatch.core.status import project  # noqa: E402
from dispatch.service.requests import create_job  # noqa: E402
from dispatch.stores.select import open_store  # noqa: E402
from dispatch.supervise.loop import Supervisor  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TESTBED = ROOT / "scripts" / "k8s-testbed"
STATE = Path(os.environ.get("DISPATCH_K8S_STATE", "/var/lib/dispatch-k8s-testbed"))
NAMESPACE = os.environ.get("DISPATCH_K8S_NAMESPACE", "dispatch")
RUNTIME = os.environ.get("DISPATCH_K8S_RUNTIME", "torch-distributed")
KUBECONFIG = os.environ.get("DISPATCH_KUBECONFIG", str(STATE / "conf" / "dispatch.kubeconfig"))
SDK_PYTHON = os.environ.get("KFSDK_PYTHON", "/tmp/kfsdk-venv/bin/python")
_LINE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
    """kubectl as the cluster's admin (the testbed's wrapper)."""
    done = subprocess.run(
        [str(TESTBED), "kubectl", *args], input=input, text=True, capture_output=True, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _server() -> str:
    text = (STATE / "conf" / "admin.kubeconfig").read_text()
    found = re.search(r"server: (\S+)", text)
    if found is None:
        raise RuntimeError("no server in the admin kubeconfig")
    return found.group(1)


class ApiServer:
    """The API server's counters, read as its admin."""

    def __init__(self) -> None:
        pki = STATE / "pki"
        self._ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self._ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self._url = _server() + "/metrics"
        self.pid = int((STATE / "run" / "kube-apiserver.pid").read_text().strip())

    def _scrape(self, metric: str) -> list[tuple[dict[str, str], float]]:
        with urllib.request.urlopen(self._url, context=self._ctx, timeout=30) as r:
            text = r.read().decode()
        out = []
        for line in text.splitlines():
            m = _LINE.match(line)
            if m is not None and m.group(1) == metric:
                out.append((dict(_LABEL.findall(m.group(2))), float(m.group(3))))
        return out

    def watches(self) -> Counter[tuple[str, str]]:
        """Watches open now (apiserver_longrunning_requests), by ("WATCH", resource)."""
        out: Counter[tuple[str, str]] = Counter()
        for lab, v in self._scrape("apiserver_longrunning_requests"):
            if lab.get("verb") == "WATCH" and v:
                out[("WATCH", lab.get("resource", ""))] += int(v)
        return out

    def requests(self) -> Counter[tuple[str, str, str]]:
        """apiserver_request_total summed by (verb, resource[/subresource], code)."""
        out: Counter[tuple[str, str, str]] = Counter()
        for lab, v in self._scrape("apiserver_request_total"):
            res = lab.get("resource", "") or lab.get("subresource", "")
            if lab.get("resource") and lab.get("subresource"):
                res += "/" + lab["subresource"]
            out[(lab.get("verb", ""), res, lab.get("code", ""))] += int(v)
        return out

    def cpu_s(self) -> float:
        """The kube-apiserver process's user + system CPU time so far, in seconds."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The control plane's own heartbeats and health probes: left out of the listings.
NOISE = {"leases", "endpoints", "/metrics", "/healthz", "/readyz", "/livez"}
# Discovery (non-resource GETs the controllers repeat): shown, never counted as a GET of a job.
DISCOVERY = {"api", "apis", "openapi/v2", "openapi/v3", "version", "/version"}


def delta(
    before: Counter[tuple[str, str, str]], after: Counter[tuple[str, str, str]]
) -> Counter[tuple[str, str]]:
    """Requests between two scrapes by (verb, resource), codes summed."""
    out: Counter[tuple[str, str]] = Counter()
    for key, n in after.items():
        d = n - before.get(key, 0)
        if d:
            out[(key[0], key[1])] += d
    return out


def fmt(counts: Counter[tuple[str, str]], per: float = 1.0, skip: Iterable[str] = ()) -> str:
    """'LIST trainjobs 1, WATCH pods 2' (divided by ``per``); resources in ``skip`` left out."""
    items = [(k, n / per) for k, n in sorted(counts.items()) if k[1] not in set(skip)]
    return ", ".join(f"{v} {r} {n:g}" for (v, r), n in items) or "none"


def total(
    counts: Counter[tuple[str, str]], verbs: Iterable[str], skip: Iterable[str] = NOISE | DISCOVERY
) -> int:
    """Requests of these verbs on resources (heartbeats, probes and discovery left out)."""
    vs, sk = set(verbs), set(skip)
    return sum(n for (v, r), n in counts.items() if v in vs and r not in sk)


# ---------------------------------------------------------------- dispatch


class RecordingBackend:
    """The real KubeflowBackend; keeps the last Discovery so statuses are projected from what
    the supervisor's own tick saw (no extra request)."""

    def __init__(self, backend: KubeflowBackend) -> None:
        self.inner = backend
        self.last: Discovery | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        self.last = self.inner.discover(tokens, refs)
        return self.last


@dataclass
class DispatchRig:
    store: Any
    backend: RecordingBackend
    supervisor: Supervisor

    def add_job(
        self, name: str, env: dict[str, str], *, runtime: str = RUNTIME, **spec: Any
    ) -> str:
        kubeflow = {"namespace": NAMESPACE, "runtime": runtime, **spec.pop("kubeflow", {})}
        data: dict[str, Any] = {
            "name": name,
            "backend": "kubeflow",
            "command": ["python", "train.py"],
            "env": env,
            "kubeflow": kubeflow,
            **spec,
        }
        return create_job(
            self.store,
            parse_spec(data, f"<{name}>", backends=traits()),
            self.backend.inner.declarations(),
            datetime.now(UTC),
            actor="bench",
        )

    def refs(self, job_id: str) -> list[str]:
        job = fold(self.store.read(job_id), datetime.now(UTC))
        return [s.ref for s in job.submissions if s.ref is not None]

    def status(self, job_id: str) -> Any:
        now = datetime.now(UTC)
        return project(fold(self.store.read(job_id), now), self.backend.last, now)

    def close(self) -> None:
        self.backend.inner.close()


def dispatch_rig(work: Path, *, node_loss_window_s: float = 60.0) -> DispatchRig:
    work.mkdir(parents=True, exist_ok=True)
    store = open_store(f"sqlite:///{work / 'record.sqlite'}")
    return reopen_rig(store, node_loss_window_s=node_loss_window_s)


def reopen_rig(store: Any, *, node_loss_window_s: float = 60.0) -> DispatchRig:
    """A fresh backend (a fresh informer) and supervisor on the same record: what a restarted
    ``dispatch supervise`` has."""
    from datetime import timedelta

    backend = RecordingBackend(
        KubeflowBackend(
            kubeconfig=KUBECONFIG,
            namespaces=[NAMESPACE],
            node_loss_window=timedelta(seconds=node_loss_window_s),
        )
    )
    sup = Supervisor(store, lambda _name: backend, name="bench")  # type: ignore[arg-type,return-value]
    return DispatchRig(store, backend, sup)


def dispatch_words(status: Any) -> str:
    c = status.cause
    if c is None:
        return f"{status.state.value}, no cause"
    bits = [f"{status.state.value}, cause {c.kind.value} ({c.provenance.value})"]
    if c.exit_code is not None:
        bits.append(f"exit {c.exit_code}")
    app = status.error  # the application's own words (AppError), when captured
    if app is not None and app.message:
        bits.append(f"application error {app.message!r} ({app.source.value})")
    if c.detail:
        bits.append(f"detail {c.detail[:160]!r}")
    return "; ".join(bits)


# ---------------------------------------------------------------- the SDK peer


class SdkPeer:
    """bench/kfsdk_peer.py under the SDK's venv; each call one command, its JSON answer."""

    def __init__(self, kubeconfig: str = KUBECONFIG) -> None:
        self.proc = subprocess.Popen(
            [SDK_PYTHON, str(ROOT / "bench" / "kfsdk_peer.py"), NAMESPACE, kubeconfig],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().strip()
        if first != "ready":
            raise RuntimeError(f"the SDK peer did not start: {first!r}")

    def ask(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def sdk_version() -> str:
    done = subprocess.run(
        [SDK_PYTHON, "-c", "import importlib.metadata as m; print(m.version('kubeflow'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def testbed(*args: str) -> None:
    """A testbed subcommand (lose-node, restore-node), on this testbed's state."""
    subprocess.run([str(TESTBED), *args], check=True, capture_output=True)
