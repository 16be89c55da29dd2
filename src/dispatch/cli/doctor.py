"""`dispatch doctor`: what a first job needs, checked before it is submitted; and
`dispatch kubeflow manifests`: what dispatch needs of a cluster, as objects to apply.

The checks live with each backend (backends/<name>/doctor.py, plain ``Check`` rows); this
module only picks the backend's options and renders. Exit 0 only when every check a job
needs passed; 1 when one found a problem (a degraded one is said, and still exit 0).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from dispatch.backends.checks import Check, Verdict, all_needed_there
from dispatch.cli.common import emit_json, handle_errors, json_option
from dispatch.errors import EXIT_FAILED, BadInput

MARK = {Verdict.OK: "ok", Verdict.DEGRADED: "DEGRADED", Verdict.PROBLEM: "PROBLEM",
        Verdict.SKIPPED: "skipped"}


def _kubeflow(namespace: str | None, runtime: str | None, runtime_kind: str,
              ) -> tuple[list[Check], list[dict[str, Any]], str, dict[str, Any] | None]:
    from dispatch.backends.kubeflow.client import ClientSettings, KubeClient
    from dispatch.backends.kubeflow.doctor import doctor
    from dispatch.backends.kubeflow.kubeconfig import KubeConfigError
    from dispatch.backends.kubeflow.origin import config_origin
    from dispatch.backends.registry import KUBECONFIG
    from dispatch.support.paths import K8S_CONTEXT, env_path

    kubeconfig = str(p) if (p := env_path(KUBECONFIG)) else None
    context = os.environ.get(K8S_CONTEXT) or None
    try:
        cfg, origin = config_origin(kubeconfig, context)
        kube = KubeClient(ClientSettings(kubeconfig=kubeconfig, context=context, retries=1),
                          config=cfg)
    except KubeConfigError as err:
        return ([Check("configuration", Verdict.PROBLEM, str(err),
                       f"set {KUBECONFIG} (or KUBECONFIG) to a kubeconfig of yours, and "
                       f"{K8S_CONTEXT} to a context in it")], [], "", None)
    ns = namespace or os.environ.get("DISPATCH_K8S_NAMESPACE") or kube.default_namespace
    try:
        checks, accesses = doctor(kube, origin, cfg, ns, runtime, runtime_kind)
    finally:
        kube.close()
    return checks, [a.as_json() for a in accesses], ns, origin.as_json()


def _runtime_of(spec: Path | None, runtime: str | None) -> tuple[str | None, str]:
    if spec is None:
        return runtime, "ClusterTrainingRuntime"
    if runtime is not None:
        raise BadInput("give --runtime or --spec, not both")
    from dispatch.backends.kubeflow.manifest import parse_section
    from dispatch.backends.registry import traits
    from dispatch.core.spec import parse_spec
    from dispatch.service.specfile import load_yaml_file

    job = parse_spec(load_yaml_file(spec), str(spec), backends=traits())
    ref = parse_section(job.kubeflow).runtime_ref
    return ref.name, ref.kind


@click.command()
@click.option("--backend", type=click.Choice(["local", "slurm", "kubeflow"]), default="local",
              show_default=True)
@click.option("--namespace", default=None, help="kubeflow: the namespace jobs run in "
              "(default: DISPATCH_K8S_NAMESPACE, else the kubeconfig context's).")
@click.option("--runtime", default=None, help="kubeflow: the ClusterTrainingRuntime to check.")
@click.option("--spec", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="kubeflow: check the runtime this job spec names.")
@click.option("--partition", default=None, help="slurm: the partition to check (default: "
              "the cluster's default one).")
@json_option
@handle_errors
def doctor(backend: str, namespace: str | None, runtime: str | None, spec: Path | None,
           partition: str | None, as_json: bool) -> None:
    """Check what a first job on BACKEND needs, and say how to fix what is missing."""
    accesses: list[dict[str, Any]] = []
    configuration: dict[str, Any] | None = None
    if backend == "kubeflow":
        name, kind = _runtime_of(spec, runtime)
        checks, accesses, namespace, configuration = _kubeflow(namespace, name, kind)
    elif backend == "slurm":
        from dispatch.backends.slurm.doctor import doctor as slurm_doctor

        checks = slurm_doctor(partition)
    else:
        from dispatch.backends.local import default_root
        from dispatch.backends.local.doctor import doctor as local_doctor
        from dispatch.backends.local.root import LocalRoot
        from dispatch.backends.registry import LOCAL_ROOT
        from dispatch.support.paths import env_path

        root = env_path(LOCAL_ROOT) or default_root()
        checks = local_doctor(LocalRoot(Path(os.path.abspath(root)), LOCAL_ROOT))
    ok = all_needed_there(checks)
    if as_json:
        out: dict[str, Any] = {"backend": backend, "ok": ok,
                               "checks": [c.as_json() for c in checks]}
        if backend == "kubeflow":
            out["namespace"] = namespace
            out["configuration"] = configuration
            out["permissions"] = accesses
        emit_json(out)
    else:
        _render(checks, accesses)
        click.echo("ready: a job can run" if ok else "not ready: fix the PROBLEM lines above")
    if not ok:
        sys.exit(EXIT_FAILED)


def _render(checks: list[Check], accesses: list[dict[str, Any]]) -> None:
    from dispatch.cli.render import visible

    for c in checks:
        click.echo(f"{MARK[c.verdict]:9} {c.name}: {visible(c.detail)}")
        if c.fix and c.verdict in (Verdict.PROBLEM, Verdict.DEGRADED):
            click.echo(f"{'':9} fix: {visible(c.fix)}")
    if accesses:
        click.echo("")
        click.echo(f"{'VERB':7} {'RESOURCE':40} {'SCOPE':9} ANSWER")
        for a in accesses:
            res = f"{a['resource']}.{a['group']}" if a["group"] else a["resource"]
            scope = "cluster" if a["cluster"] else "namespace"
            answer = "allowed" if a["allowed"] else (
                "DENIED" if a["needed"] else "denied (degraded)")
            click.echo(f"{a['verb']:7} {res:40} {scope:9} {answer}")


@click.group()
def kubeflow() -> None:
    """The kubeflow backend."""


@kubeflow.command("manifests")
@click.option("--namespace", default="default", show_default=True,
              help="The namespace dispatch's jobs run in.")
@click.option("--user", default=None, help="Grant to this Kubernetes user.")
@click.option("--service-account", default=None,
              help="Grant to this service account of NAMESPACE (made too). Default: dispatch.")
@click.option("--namespace-only", is_flag=True, help="No cluster-scoped object (for clusters "
              "that refuse a ClusterRole on nodes): node-loss detection is then degraded.")
@click.option("--runtime-only", is_flag=True, help="Only the runtime (native restarts off).")
@click.option("--serve", is_flag=True, help="Also `dispatch serve` in NAMESPACE as the service "
              "account: a Deployment (2 replicas, one active) and its Service; needs --image.")
@click.option("--image", default=None, help="With --serve: the container image, with "
              "dispatch on PATH.")
@handle_errors
def manifests(namespace: str, user: str | None, service_account: str | None,
              namespace_only: bool, runtime_only: bool, serve: bool, image: str | None) -> None:
    """Print the runtime and the RBAC dispatch needs, to pipe to `kubectl apply -f -`."""
    from dispatch.backends.kubeflow.manifests import Subject, cluster_manifests, render, runtime

    if user is not None and service_account is not None:
        raise BadInput("give --user or --service-account, not both")
    _check_serve(serve, image, user, runtime_only)
    if runtime_only:
        click.echo(render([runtime()]), nl=False)
        return
    subject = (Subject("User", user) if user is not None
               else Subject("ServiceAccount", service_account or "dispatch"))
    import re

    label = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
    if not label.fullmatch(namespace):
        raise BadInput(f"--namespace: {namespace!r} is not a namespace's name (lower-case "
                       "letters, digits and '-', at most 63)")
    if subject.kind == "ServiceAccount" and not re.fullmatch(
            r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", subject.name):
        raise BadInput(f"--service-account: {subject.name!r} is not a service account's name")
    if not subject.name or not subject.name.isprintable():
        raise BadInput(f"--user: {subject.name!r} is not a user's name")
    text = render(cluster_manifests(namespace, subject, namespace_only=namespace_only),
                  namespace_only=namespace_only)
    if serve and image is not None:
        from dispatch.backends.kubeflow.serve_manifests import (
            render_serve,
            serve_header,
            serve_manifests,
        )

        text = ("\n".join(serve_header(namespace)) + "\n" + text + "---\n"
                + render_serve(serve_manifests(namespace, subject.name, image)))
    click.echo(text, nl=False)


def _check_serve(serve: bool, image: str | None, user: str | None, runtime_only: bool) -> None:
    from dispatch.backends.kubeflow.serve_manifests import image_problem

    if not serve:
        if image is not None:
            raise BadInput("--image is for --serve (the image dispatch serve runs from)")
        return
    if image is None:
        raise BadInput("--serve needs --image IMAGE (a container image with dispatch on PATH)")
    if why := image_problem(image):
        raise BadInput(f"--image: {why}")
    if user is not None:
        raise BadInput("--serve runs as a service account (--service-account), not --user")
    if runtime_only:
        raise BadInput("give --serve or --runtime-only, not both")


COMMANDS = (doctor, kubeflow)
