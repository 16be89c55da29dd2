"""``dispatch serve`` inside the cluster, as objects to ``kubectl apply`` (issue 47 item 8):
``dispatch kubeflow manifests --serve --image IMAGE`` prints ``render(serve_manifests(...))``
after the service account's RBAC (manifests.py). Pure.

What the Deployment relies on, each part dispatch's own:

- two replicas, one active per scope: every replica serves the kubeflow scope (``--scope
  kubeflow``) and the record's leases (supervise/) make one the active supervisor and the
  other a hot standby that takes over within a lease period of the active one's end;
- the record is PostgreSQL (both replicas share it): its URL comes from the Secret
  ``STORE_SECRET`` (key ``url``) as ``DISPATCH_STORE``, never written in the manifest;
- the API server is reached as the pod's service account (kubeconfig.py: no kubeconfig in
  the pod, so its mounted token), bound to the RBAC ``manifests --service-account`` grants;
- the dashboard and API need a token over TCP (http/auth.py): the team tokens come from the
  Secret ``TOKENS_SECRET`` (key ``tokens``, lines ``name:token``). ``--token-file`` reads only
  a private file of the user it runs as, never through a link (a Secret volume's files are
  root's links), so the container copies it, mode 600, into a fresh private directory under
  /tmp (sticky) before it starts serve there;
- the probes ask ``/healthz``, the one path that needs no token and says only "ok".
"""

from __future__ import annotations

import re
from typing import Any

import yaml

SERVE_NAME = "dispatch-serve"
STORE_SECRET = "dispatch-store"
TOKENS_SECRET = "dispatch-serve-tokens"
PORT = 8642
USER_ID = 1000
TOKENS_MOUNT = "/etc/dispatch/tokens"
# An image reference (registry/name:tag@digest): no whitespace or control character.
IMAGE = re.compile(r"[^\s\x00-\x1f\x7f-\x9f]{1,500}")

# The container's command: the Secret's tokens copied where --token-file trusts them.
START = (
    "set -eu\n"
    "umask 077\n"
    "export HOME=\"$(mktemp -d)\"\n"
    f"cp {TOKENS_MOUNT}/tokens \"$HOME/tokens\"\n"
    f"exec dispatch serve --host 0.0.0.0 --port {PORT} --token-file \"$HOME/tokens\" "
    "--scope kubeflow\n"
)


def image_problem(image: str) -> str:
    """Why ``image`` cannot be a container image reference; "" if it can."""
    if not IMAGE.fullmatch(image):
        return (f"{image[:80]!r} is not an image reference (1-500 characters, no whitespace "
                "or control character)")
    return ""


def deployment(namespace: str, service_account: str, image: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": SERVE_NAME, "app.kubernetes.io/part-of": "dispatch"}
    probe = {"httpGet": {"path": "/healthz", "port": "http"}}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": SERVE_NAME, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 2,  # one active per scope through the leases, one standby
            "selector": {"matchLabels": {"app.kubernetes.io/name": SERVE_NAME}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": service_account,
                    "automountServiceAccountToken": True,
                    # serve hands its leases back on SIGTERM; the standby takes over at once
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": USER_ID,
                                        "runAsGroup": USER_ID, "fsGroup": USER_ID,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "serve",
                        "image": image,
                        "command": ["/bin/sh", "-c", START],
                        "env": [{"name": "DISPATCH_STORE", "valueFrom": {"secretKeyRef": {
                            "name": STORE_SECRET, "key": "url"}}}],
                        "ports": [{"name": "http", "containerPort": PORT}],
                        "readinessProbe": {**probe, "periodSeconds": 10},
                        "livenessProbe": {**probe, "initialDelaySeconds": 30,
                                          "periodSeconds": 20, "failureThreshold": 3},
                        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "tokens", "mountPath": TOKENS_MOUNT,
                                          "readOnly": True}],
                    }],
                    # readable by the pod's group (fsGroup) only: the copy above reads it
                    "volumes": [{"name": "tokens", "secret": {
                        "secretName": TOKENS_SECRET, "defaultMode": 0o440,
                        "items": [{"key": "tokens", "path": "tokens"}]}}],
                },
            },
        },
    }


def service(namespace: str) -> dict[str, Any]:
    """The dashboard and API inside the cluster. A browser's session lives in the replica
    that logged it in (http/auth.py keeps sessions in memory): ClientIP affinity keeps a
    browser on one; a bearer token works on either."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVE_NAME, "namespace": namespace},
        "spec": {"selector": {"app.kubernetes.io/name": SERVE_NAME},
                 "ports": [{"name": "http", "port": PORT, "targetPort": "http"}],
                 "sessionAffinity": "ClientIP"},
    }


def serve_manifests(namespace: str, service_account: str, image: str) -> list[dict[str, Any]]:
    return [deployment(namespace, service_account, image), service(namespace)]


def serve_header(namespace: str) -> list[str]:
    """What to create before applying: the two Secrets the Deployment names, never in it."""
    return [
        f"# dispatch serve in namespace {namespace}: a Deployment (2 replicas: one active "
        "supervisor per scope, one standby) and its Service (docs/kubeflow.md#dispatch-in-"
        "the-cluster).",
        "# Create its two Secrets first (their values are never in this output):",
        f"#   kubectl -n {namespace} create secret generic {STORE_SECRET} "
        "--from-file=url=./store-url   # one line: postgresql://USER:PASSWORD@HOST/DB",
        f"#   kubectl -n {namespace} create secret generic {TOKENS_SECRET} "
        "--from-file=tokens=./tokens   # lines name:token",
        "# IMAGE must have dispatch on PATH (pip install dispatch-jobs), and /bin/sh, "
        "mktemp and cp.",
    ]


class _Dumper(yaml.SafeDumper):
    """Plain YAML a person reads: no anchors for repeated parts, the start script as a
    literal block."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


def render_serve(docs: list[dict[str, Any]]) -> str:
    return "---\n".join(yaml.dump(d, Dumper=_Dumper, sort_keys=False) for d in docs)
