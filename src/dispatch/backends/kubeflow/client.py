"""The Kubernetes API, as the kubeflow backend needs it: list, watch, get, create, merge-patch,
delete, and a pod's log.

Built on lightkube (pinned in pyproject.toml). Why lightkube and not the official
``kubernetes`` client: it is small (httpx + msgspec, which dispatch already uses, + PyYAML),
its generic resources are plain dicts, so the pure mapping reads exactly the JSON the API
server sent, with no generated model classes in between (the official client would decode a
TrainJob, which it has no model for, into untyped dicts anyway, and a Pod into a model we would
have to turn back into JSON); and its errors carry the API server's ``Status``. Where the
configuration comes from, and which kubeconfig may be used, is ours (kubeconfig.py: kubectl's
order, trusted files only), as is running an exec credential plugin (exec_credential.py:
lightkube runs no ``client.authentication.k8s.io/v1`` plugin).

Retries are ours: connection refused, timeouts, 429 and 5xx are retried ``retries`` times with
backoff, then raised as ``SchedulerUnreachable`` (never a state). Any other answer (404, 409,
422, 403) is the API server speaking: it comes back as ``ApiAnswer`` with its words.

Watches (``open_watch``) are one request each, never retried here: the informer decides what a
broken or expired watch means. The stream is read with lightkube's own request building (auth,
TLS, paths) but not with ``Client.watch``, which reconnects by itself, hides when a connection
is up, has no read timeout, and cannot be interrupted from another thread; ``WatchStream.abort``
shuts the socket down so a reader blocked on it wakes at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx2
import msgspec
from lightkube import ApiError, Client
from lightkube.core.exceptions import ConfigError
from lightkube.core.selector import build_selector
from lightkube.generic_resource import GenericGlobalResource, GenericNamespacedResource
from lightkube.resources.core_v1 import PodLog as PodLogRes
from lightkube.types import CascadeType, PatchType

# What the API server says back lives in api_answers.py; re-exported for the modules here.
from dispatch.backends.kubeflow.api_answers import BACKEND as BACKEND
from dispatch.backends.kubeflow.api_answers import ApiAnswer as ApiAnswer
from dispatch.backends.kubeflow.api_answers import WatchExpired as WatchExpired
from dispatch.backends.kubeflow.api_answers import WatchStream as WatchStream
from dispatch.backends.kubeflow.api_answers import transient
from dispatch.backends.kubeflow.exec_credential import ExecCredentialAuth
from dispatch.backends.kubeflow.kubeconfig import (
    SERVICE_ACCOUNT_DIR,
    KubeConfigError,
    load_kubeconfig,
)
from dispatch.backends.kubeflow.resources import (
    ClusterRuntimeRes,
    EventRes,
    JobRes,
    JobSetRes,
    NodeRes,
    PodRes,
    RuntimeRes,
    TrainJobRes,
)
from dispatch.core.model import SchedulerUnreachable
from dispatch.support.deadline import READ_DEADLINE_ENV, deadline_seconds, time_left
from dispatch.support.retry import with_backoff

# The resources live in resources.py; the backend's modules import them from here.
__all__ = ["ClusterRuntimeRes", "EventRes", "JobRes", "JobSetRes", "NodeRes", "PodRes",
           "RuntimeRes", "TrainJobRes"]


ResourceType = type[GenericNamespacedResource] | type[GenericGlobalResource]
Objects = list[dict[str, Any]]  # an alias: inside KubeClient ``list`` names the method
# Objects a LIST request returns at most (the API server's ``limit``); the rest follow by
# ``continue`` from the same snapshot.
LIST_PAGE = 500
T = TypeVar("T")


class _Transient(Exception):
    """A failure worth trying again (connection, timeout, 429, 5xx), with its words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _PastDeadline(Exception):
    """The deadline in force passed before an answer (args: the last failure's words)."""


# A request inside a deadline waits at least this long (a deadline all but spent still lets
# one request say why it failed, rather than none).
MIN_REQUEST_S = 0.05


@dataclass(frozen=True)
class ClientSettings:
    """How to reach the API server and how hard to try."""

    kubeconfig: str | None = None  # None: $KUBECONFIG, else ~/.kube/config, else in-cluster
    context: str | None = None
    timeout_s: float = 10.0
    retries: int = 3
    backoff_s: float = 0.5
    service_account_dir: str = SERVICE_ACCOUNT_DIR


def load_config(
    kubeconfig: str | None,
    context: str | None,
    service_account_dir: str = ClientSettings.service_account_dir,
) -> Any:
    """The configuration kubectl would use (``load_kubeconfig``: the named file, else the
    files of $KUBECONFIG merged, else ~/.kube/config, else the pod's service account), every
    kubeconfig trusted and well formed; KubeConfigError naming what is wrong."""
    return load_kubeconfig(kubeconfig, context, service_account_dir)


def _where(cfg: Any) -> str:
    fname = getattr(cfg, "fname", None)
    return (f"kubeconfig {fname}: context {cfg.context_name}" if fname
            else "the pod's service account")


class KubeClient:
    """One lightkube client plus our retry rule and error translation."""

    def __init__(
        self,
        settings: ClientSettings = ClientSettings(),
        *,
        config: Any | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        cfg = (
            config
            if config is not None
            else load_config(settings.kubeconfig, settings.context, settings.service_account_dir)
        )
        self.default_namespace: str = getattr(cfg, "namespace", None) or "default"
        user = getattr(cfg, "user", None)
        try:
            self._client: Any = Client(
                # the exec plugin is ours to run (below), not lightkube's
                config=cfg if user is None or user.exec is None else cfg._replace(
                    user=msgspec.structs.replace(user, exec=None)),
                timeout=httpx2.Timeout(settings.timeout_s),
                field_manager="dispatch",
                trust_env=False,
            )
        except (ConfigError, OSError, ValueError) as err:  # ssl.SSLError is an OSError
            raise KubeConfigError(f"{_where(cfg)}: its TLS files or credentials cannot be "
                                  f"used: {err}") from None
        if user is not None and user.exec is not None:
            # lightkube runs only v1beta1 plugins; ours runs v1 too (exec_credential.py)
            http = self._client._client._client  # lightkube's httpx client
            try:
                http.auth = ExecCredentialAuth(user.exec, cfg.context.user or "")
            except KubeConfigError as err:
                raise KubeConfigError(f"{_where(cfg)}: {err}") from None
        http = self._client._client._client  # lightkube's httpx client
        default_build = http.build_request

        def build_request(*args: Any, timeout: Any = httpx2.USE_CLIENT_DEFAULT,
                          **kw: Any) -> Any:
            # Inside a deadline (a read's, or a submit's: support/deadline.py) a request
            # waits at most the time left; outside, the client's own timeout. Per thread, so
            # the informer's watches keep theirs.
            if timeout is httpx2.USE_CLIENT_DEFAULT and deadline_seconds() is not None:
                timeout = httpx2.Timeout(max(MIN_REQUEST_S, time_left(settings.timeout_s)))
            return default_build(*args, timeout=timeout, **kw)

        http.build_request = build_request  # type: ignore[method-assign]
        self._sleep = sleep

    def close(self) -> None:
        self._client.close()

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``; connection errors, timeouts, 429 and 5xx retried with backoff, then
        SchedulerUnreachable; any other answer is the API server speaking: ApiAnswer."""

        def once() -> T:
            try:
                return fn()
            except ApiError as err:
                code = int(err.status.code or err.response.status_code)
                if not transient(code):
                    status = err.status
                    raise ApiAnswer(code, status.reason or "", status.message or "") from None
                raise _Transient(f"{what}: {code} {err.status.message or ''}".strip()) from None
            except httpx2.HTTPStatusError as err:
                code = err.response.status_code
                if not transient(code):
                    raise ApiAnswer(code, err.response.reason_phrase, err.response.text) from None
                raise _Transient(f"{what}: {code} {err.response.text[:200]}") from None
            except httpx2.TransportError as err:
                raise _Transient(f"{what}: {type(err).__name__}: {err}") from None

        last = [what]  # the last failure's words, for the deadline's error

        def attempt() -> T:
            if deadline_seconds() is not None and time_left(1.0) <= 0:
                raise _PastDeadline(last[0])
            try:
                return once()
            except _Transient as err:
                last[0] = err.reason
                raise

        def sleep(seconds: float) -> None:
            # No retry past a deadline in force: its wait would end after it.
            if deadline_seconds() is not None and time_left(seconds) < seconds:
                raise _PastDeadline(last[0])
            self._sleep(seconds)

        try:
            return with_backoff(attempt, attempts=self.settings.retries + 1,
                                backoff=self.settings.backoff_s, retry_on=_Transient,
                                sleep=sleep)
        except _Transient as err:
            if deadline_seconds() is not None and time_left(1.0) <= 0:
                raise SchedulerUnreachable(
                    BACKEND, f"{err.reason}; no answer within the deadline "
                             f"({deadline_seconds() or 0:g}s, {READ_DEADLINE_ENV})") from None
            raise SchedulerUnreachable(BACKEND, err.reason) from None
        except _PastDeadline as err:
            raise SchedulerUnreachable(
                BACKEND, f"{err}; no answer within the deadline "
                         f"({deadline_seconds() or 0:g}s, {READ_DEADLINE_ENV})") from None

    def list(
        self,
        res: ResourceType,
        namespace: str | None,
        labels: Mapping[str, str | None],
        fields: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """One list call (no chunking: one request). ``labels`` value None means 'exists';
        ``fields``: a field selector (equality only)."""
        kind = res._api_info.resource.kind

        def run() -> list[dict[str, Any]]:
            if namespace is None:
                items = self._client.list(res, labels=labels, fields=fields)
            else:
                items = self._client.list(res, namespace=namespace, labels=labels, fields=fields)
            return [dict(item) for item in items]

        return self._call(f"list {kind} in {namespace or 'cluster'}", run)

    def list_versioned(
        self,
        res: ResourceType,
        namespace: str | None,
        labels: Mapping[str, str | None],
        fields: Mapping[str, str] | None = None,
        keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> tuple[Objects, str]:
        """One LIST, and the collection's resourceVersion (where a watch starts); read in
        pages of LIST_PAGE objects (``limit`` and ``continue``: one consistent snapshot), each
        object passed through ``keep`` as its page arrives, so that only one page is ever
        held whole (the informer's projection: a first LIST of 5,000 TrainJobs held every
        full object at once, 441 MiB)."""
        kind = res._api_info.resource.kind

        def listed(page: int | None) -> tuple[Objects, str]:
            if namespace is None:
                found = self._client.list(res, labels=labels, fields=fields, chunk_size=page)
            else:
                found = self._client.list(res, namespace=namespace, labels=labels, fields=fields,
                                          chunk_size=page)
            items = [dict(item) if keep is None else keep(dict(item)) for item in found]
            return items, str(found.resourceVersion)

        def run() -> tuple[Objects, str]:
            try:
                return listed(LIST_PAGE)
            except ApiError as err:
                if int(err.status.code or err.response.status_code) != 410:
                    raise
                # the snapshot of its continue token was compacted while it was read: the
                # whole list in one answer, as client-go's reflector falls back to
                return listed(None)

        return self._call(f"list {kind} in {namespace or 'cluster'}", run)

    def open_watch(
        self,
        res: ResourceType,
        namespace: str | None,
        labels: Mapping[str, str | None],
        resource_version: str,
        server_timeout_s: int,
        fields: Mapping[str, str] | None = None,
    ) -> WatchStream:
        """One watch request from ``resource_version``. The server ends it after
        ``server_timeout_s``; a read silent for that long plus the client timeout means the
        connection is dead. Raises SchedulerUnreachable, WatchExpired or ApiAnswer."""
        kind = res._api_info.resource.kind
        what = f"watch {kind} in {namespace or 'cluster'}"
        generic = self._client._client  # lightkube's GenericSyncClient: paths, auth, TLS
        params: dict[str, Any] = {
            "resourceVersion": resource_version,
            "timeoutSeconds": server_timeout_s,
            "allowWatchBookmarks": "true",
        }
        if labels:
            params["labelSelector"] = build_selector(dict(labels))
        if fields:
            params["fieldSelector"] = build_selector(dict(fields), for_fields=True)
        timeout = httpx2.Timeout(
            self.settings.timeout_s, read=server_timeout_s + self.settings.timeout_s
        )
        try:
            br = generic.prepare_request(
                "list", res=res, namespace=namespace, watch=True, params=params
            )
            request = generic._client.build_request(
                br.method, br.url, params=br.params, timeout=timeout
            )
            response = generic.send(request, stream=True)
        except httpx2.TransportError as err:
            raise SchedulerUnreachable(BACKEND, f"{what}: {type(err).__name__}: {err}") from None
        if response.status_code != 200:
            try:
                body = json.loads(response.read() or b"{}")
            except (ValueError, httpx2.HTTPError):
                body = {}
            finally:
                response.close()
            message = str(body.get("message") or response.reason_phrase)
            code = response.status_code
            if code == 410:
                raise WatchExpired(f"{what}: {message}")
            if transient(code):
                raise SchedulerUnreachable(BACKEND, f"{what}: {code} {message}")
            raise ApiAnswer(code, str(body.get("reason") or ""), message)
        return WatchStream(response, what)

    def probe(self) -> None:
        """``GET /version``, once, not retried: whether the API server answers at all (the
        informer asks when every watch has been silent); any HTTP answer is one. Raises
        SchedulerUnreachable when none comes within the client's timeout."""
        http = self._client._client._client  # lightkube's httpx client: base URL, auth, TLS
        try:
            http.get("/version", timeout=self.settings.timeout_s).close()
        except httpx2.TransportError as err:
            raise SchedulerUnreachable(
                BACKEND, f"GET /version: {type(err).__name__}: {err}"
            ) from None

    def request_json(self, method: str, path: str,
                     body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One JSON request to ``path`` (``/version``, API discovery, a SelfSubjectAccessReview),
        retried and translated like every call: an answer other than 2xx is ApiAnswer with
        the API server's words."""
        http = self._client._client._client  # lightkube's httpx client: base URL, auth, TLS

        def run() -> dict[str, Any]:
            response = http.request(method, path, json=body, timeout=self.settings.timeout_s)
            try:
                data = json.loads(response.read() or b"{}")
            except ValueError:
                data = {}
            finally:
                response.close()
            code = response.status_code
            if code >= 300:
                message = str(data.get("message") or response.reason_phrase)
                if transient(code):
                    raise _Transient(f"{method} {path}: {code} {message}")
                raise ApiAnswer(code, str(data.get("reason") or ""), message)
            return data if isinstance(data, dict) else {}

        return self._call(f"{method} {path}", run)

    def pod_log(self, namespace: str, pod: str, params: Mapping[str, str]) -> bytes:
        """``GET /api/v1/namespaces/{namespace}/pods/{pod}/log`` with ``params`` (container,
        sinceTime, timestamps, limitBytes...): the log text as bytes. Retried and translated
        like every call: an answer such as 404 (no such pod) or 400 (its container has not
        started) is ApiAnswer with the API server's words."""
        generic = self._client._client  # lightkube's GenericSyncClient: paths, auth, TLS

        def run() -> bytes:
            br = generic.prepare_request(
                "get", PodLogRes, name=pod, namespace=namespace, params=dict(params)
            )
            response = generic.send(generic.build_adapter_request(br))
            generic.raise_for_status(response)
            return bytes(response.content)

        return self._call(f"log of pod {namespace}/{pod}", run)

    def get(self, res: ResourceType, namespace: str | None, name: str
            ) -> dict[str, Any] | None:
        """One object (``namespace`` None: a cluster-scoped one); None when it is not there."""
        kind = res._api_info.resource.kind
        try:
            obj = self._call(
                f"get {kind} {namespace or 'cluster'}/{name}",
                lambda: (self._client.get(res, name) if namespace is None
                         else self._client.get(res, name, namespace=namespace)),
            )
        except ApiAnswer as err:
            if err.code == 404:
                return None
            raise
        return dict(obj)

    def create(self, res: type[GenericNamespacedResource], body: dict[str, Any], *,
               dry_run: bool = False) -> dict[str, Any]:
        """Create ``body``; ``dry_run``: the server-side dry run (admission webhooks and
        validation run, nothing is stored)."""
        namespace = body["metadata"]["namespace"]
        obj = res.from_dict(body)
        created = self._call(
            f"create {res._api_info.resource.kind} {namespace}/{body['metadata']['name']}",
            lambda: self._client.create(obj, namespace=namespace, dry_run=dry_run),
        )
        return dict(created)

    def merge_patch(
        self, res: type[GenericNamespacedResource], namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        out = self._call(
            f"patch {res._api_info.resource.kind} {namespace}/{name}",
            lambda: self._client.patch(
                res, name, patch, namespace=namespace, patch_type=PatchType.MERGE
            ),
        )
        return dict(out)

    def delete(
        self,
        res: type[GenericNamespacedResource],
        namespace: str,
        name: str,
        cascade: CascadeType = CascadeType.FOREGROUND,
    ) -> bool:
        """Delete; False when it was already gone (a repeated stop is not an error)."""
        try:
            self._call(
                f"delete {res._api_info.resource.kind} {namespace}/{name}",
                lambda: self._client.delete(res, name, namespace=namespace, cascade=cascade),
            )
        except ApiAnswer as err:
            if err.code == 404:
                return False
            raise
        return True
