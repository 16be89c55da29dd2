"""The scope of the Kubeflow backend: ``kubeflow:<cluster id>/<namespace>``, one cluster
whatever its kubeconfig calls it (issue 47 item 6: two testbeds both named ``testbed``, and
kubeadm names every cluster ``kubernetes``; a scope shared by two clusters would share their
leases and jobs).

The cluster id, asked of the API server once per process (supervise/scopes.py caches it),
within the read deadline (DISPATCH_READ_DEADLINE):

- ``uid-<12 hex>``: the ``kube-system`` namespace's UID, the first 12 hex digits (``kubectl get
  ns kube-system -o jsonpath='{.metadata.uid}'`` starts with them). Made once by the API
  server, kept for the cluster's life, the same whichever URL or name reaches it. Needs
  ``get namespaces/kube-system`` (permissions.py; in ``dispatch kubeflow manifests``).
- ``server-<12 hex>``: where that read is refused (a namespace-only Role) or finds no
  kube-system, a digest of the server URL and the CA certificates the kubeconfig trusts it
  by. Unlike the UID it changes with the URL (a pod's ``https://10.96.0.1`` and a laptop's
  address are two scopes), so the UID is preferred; a supervisor that reads the UID also
  serves its server id (``kubeflow_scope_aliases``), so granting the permission later
  orphans no job.
- neither (refused, and no CA: ``insecure-skip-tls-verify`` or a system trust store):
  ``ClusterUnknown``, never a guess. An API server that does not answer is
  ``SchedulerUnreachable``, as every read.

``kubeflow:<context>/<namespace>`` was the scope before (the context's name): a supervisor
also serves that name of its own context (``kubeflow_scope_aliases``), so the jobs recorded
under it are not orphaned. ``describe`` says which context and cluster an id is, for people.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dispatch.backends.base import Backend
from dispatch.errors import BackendError, ClusterUnknown
from dispatch.support.deadline import deadline_seconds, read_deadline, tools_within
from dispatch.support.paths import K8S_CONTEXT, env_path

KUBE_SYSTEM = "/api/v1/namespaces/kube-system"
UID_PREFIX, SERVER_PREFIX = "uid-", "server-"
ID_HEX = 12  # 48 bits: two clusters on one record never share an id by chance
# A CA bundle is a few KiB; the bound keeps a wrong path (a device, a huge file) from hanging.
CA_MAX_BYTES = 1 << 20
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
_UID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")


@dataclass(frozen=True)
class ClusterId:
    """Which cluster: ``key`` goes into the scope; ``how`` says what it was made from."""

    key: str
    how: str


# -- pure --------------------------------------------------------------------------------------

def uid_id(uid: str) -> ClusterId:
    """The id of the cluster whose kube-system namespace has ``uid``."""
    text = uid.strip().lower()
    if not _UID.fullmatch(text):
        raise BackendError(f"kubeflow: the kube-system namespace's UID {uid!r} is no UID")
    return ClusterId(f"{UID_PREFIX}{text.replace('-', '')[:ID_HEX]}",
                     f"kube-system namespace UID {text}")


def server_id(server: str, ca_certs: Sequence[bytes]) -> ClusterId:
    """The id of the API server at ``server`` trusted by the CA certificates ``ca_certs``
    (DER): the URL's scheme, host and port (case and a default port do not matter) and
    the certificates in any order."""
    parts = urlsplit(server.strip())
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise BackendError(f"kubeflow: the server URL {server!r} has no usable port") from None
    if not host:
        raise BackendError(f"kubeflow: the server URL {server!r} names no host")
    url = f"{parts.scheme.lower()}://{host}:{port}{parts.path.rstrip('/')}"
    digest = hashlib.sha256(url.encode())
    for der in sorted(ca_certs):
        digest.update(hashlib.sha256(der).digest())
    return ClusterId(f"{SERVER_PREFIX}{digest.hexdigest()[:ID_HEX]}",
                     f"server {url} with its CA (no kube-system UID)")


def scope_string(name: str, cluster: ClusterId, namespace: str) -> str:
    return f"{name}:{cluster.key}/{namespace}"


def legacy_scope(name: str, context: str, namespace: str) -> str:
    """The scope a job was recorded under before cluster ids: the context's name."""
    return f"{name}:{context}/{namespace}"


def ca_certificates(pem: bytes, where: str) -> list[bytes]:
    """The certificates of a PEM bundle, as DER; BackendError naming ``where`` if none."""
    found = []
    for block in _PEM.findall(pem):
        try:
            found.append(ssl.PEM_cert_to_DER_cert(block.decode("ascii")))
        except (ValueError, UnicodeDecodeError):
            raise BackendError(f"kubeflow: {where}: a certificate that cannot be read") from None
    if not found:
        raise BackendError(f"kubeflow: {where}: no PEM certificate")
    return found


# -- the configuration -------------------------------------------------------------------------

def _config() -> Any:
    from dispatch.backends.kubeflow.client import load_config

    try:
        # the configuration the backend uses (registry.py): the same file and context
        kubeconfig = env_path("DISPATCH_KUBECONFIG")
        return load_config(str(kubeconfig) if kubeconfig else None,
                           os.environ.get(K8S_CONTEXT) or None)
    except BackendError as err:  # a kubeconfig that cannot be read names itself
        raise BackendError(f"kubeflow: cannot tell the scope: {err}") from None


def namespace_of(cfg: Any) -> str:
    return (os.environ.get("DISPATCH_K8S_NAMESPACE") or getattr(cfg, "namespace", None)
            or "default")


def context_of(cfg: Any) -> str:
    return getattr(cfg, "context_name", None) or "in-cluster"


def describe(cfg: Any) -> str:
    """Which context, cluster and server, for a person: the readable name of a cluster id."""
    ctx = getattr(cfg, "context", None)
    server = getattr(getattr(cfg, "cluster", None), "server", "?")
    return (f"context {context_of(cfg)}, cluster {getattr(ctx, 'cluster', None) or '?'}, "
            f"{server}")


def trusted_ca(cfg: Any) -> list[bytes] | None:
    """The CA certificates the configuration trusts its API server by (DER); None when it
    names none (``insecure-skip-tls-verify``, or the system's trust store)."""
    cluster = getattr(cfg, "cluster", None)
    if cluster is None or getattr(cluster, "insecure", False):
        return None
    data = getattr(cluster, "certificate_auth_data", None)
    if data:
        try:
            pem = base64.b64decode(data, validate=False)
        except ValueError:
            raise BackendError("kubeflow: certificate-authority-data is not base64") from None
        return ca_certificates(pem, "certificate-authority-data")
    path = getattr(cluster, "certificate_auth", None)
    if not path:
        return None
    try:
        with open(path, "rb") as f:  # as lightkube reads it (a pod's CA is behind links)
            pem = f.read(CA_MAX_BYTES + 1)
    except OSError as err:
        raise BackendError(f"kubeflow: certificate-authority {path}: {err.strerror}") from None
    if len(pem) > CA_MAX_BYTES:
        raise BackendError(f"kubeflow: certificate-authority {path}: over {CA_MAX_BYTES} bytes")
    return ca_certificates(pem, f"certificate-authority {Path(path)}")


def server_id_of(cfg: Any) -> ClusterId | None:
    ca = trusted_ca(cfg)
    if ca is None:
        return None
    return server_id(getattr(cfg.cluster, "server", ""), ca)


# -- asking the API server ---------------------------------------------------------------------

def cluster_id(kube: Any, cfg: Any) -> ClusterId:
    """Which cluster ``kube`` talks to: the kube-system UID, else the server id; ClusterUnknown
    when neither can be had; SchedulerUnreachable when the API server does not answer within
    the read deadline (the one in force, else DISPATCH_READ_DEADLINE)."""
    from dispatch.backends.kubeflow.client import ApiAnswer

    bound = (contextlib.nullcontext() if deadline_seconds() is not None
             else tools_within(read_deadline()))
    with bound:
        try:
            found = kube.request_json("GET", KUBE_SYSTEM)
        except ApiAnswer as err:
            if err.code not in (403, 404):
                raise BackendError(f"kubeflow: cannot tell which cluster this is: GET "
                                   f"namespaces/kube-system: {err}") from None
            why = f"GET namespaces/kube-system: {err}"
        else:
            uid = (found.get("metadata") or {}).get("uid")
            if isinstance(uid, str) and uid:
                return uid_id(uid)
            why = "the kube-system namespace came without a UID"
    fallback = server_id_of(cfg)
    if fallback is None:
        raise ClusterUnknown(
            f"kubeflow: cannot tell which cluster {describe(cfg)} is, so no scope: {why}, and "
            "its kubeconfig names no CA (insecure-skip-tls-verify, or the system's trust "
            "store). Grant get on namespaces/kube-system (`dispatch kubeflow manifests`), "
            "or name the cluster's CA in the kubeconfig")
    return fallback


def _ask(backend: Backend | None, cfg: Any) -> ClusterId:
    from dispatch.backends.kubeflow.client import ClientSettings, KubeClient

    kube = getattr(backend, "kube", None)
    if isinstance(kube, KubeClient):
        return cluster_id(kube, cfg)
    kubeconfig = env_path("DISPATCH_KUBECONFIG")
    own = KubeClient(ClientSettings(kubeconfig=str(kubeconfig) if kubeconfig else None,
                                    context=os.environ.get(K8S_CONTEXT) or None), config=cfg)
    try:
        return cluster_id(own, cfg)
    finally:
        own.close()


def kubeflow_scope(name: str = "kubeflow", backend: Backend | None = None) -> str:
    """``kubeflow:<cluster id>/<namespace>`` of the configuration this process uses."""
    cfg = _config()
    return scope_string(name, _ask(backend, cfg), namespace_of(cfg))


def kubeflow_scope_aliases(name: str = "kubeflow", backend: Backend | None = None
                           ) -> tuple[str, ...]:
    """The other scopes this cluster's jobs may be recorded under, served by its supervisor
    too (from the configuration alone, no API call): the context's name (the scope before
    cluster ids), and the server id (a job recorded by a namespace-only identity)."""
    cfg = _config()
    namespace = namespace_of(cfg)
    out = [legacy_scope(name, context_of(cfg), namespace)]
    with contextlib.suppress(BackendError):  # no CA: no server id to serve
        if (server := server_id_of(cfg)) is not None:
            out.append(scope_string(name, server, namespace))
    return tuple(out)
