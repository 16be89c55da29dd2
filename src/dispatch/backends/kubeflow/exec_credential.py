"""A kubeconfig ``exec`` credential plugin, run as kubectl runs it: the bearer token of the
ExecCredential it prints, for plugins of ``client.authentication.k8s.io/v1`` (the current
version, which lightkube refuses) and ``v1beta1``.

As kubectl does: the plugin gets ``KUBERNETES_EXEC_INFO`` (an ExecCredential naming the
version asked for, not interactive: dispatch has no terminal to lend it), the kubeconfig's
``env`` on top of ours, no stdin; what it prints must be an ExecCredential of the version
asked for with a token. The token is kept until its ``expirationTimestamp``, or until the API
server answers 401, then the plugin runs again. A plugin that fails, hangs past its bound or
prints something else is a ``KubeConfigError`` naming the user and the plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Generator, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx2
from lightkube.config.models import UserExec

from dispatch.backends.kubeflow.kubeconfig import KubeConfigError

EXEC_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
PLUGIN_TIMEOUT_S = 60.0  # a plugin that needs a person (a browser login) would wait forever
MOST_OUTPUT = 1 << 20


class ExecCredentialAuth(httpx2.Auth):
    """httpx auth: ``Authorization: Bearer`` with the plugin's token."""

    def __init__(self, plugin: UserExec, user: str,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        if plugin.apiVersion not in EXEC_VERSIONS:
            raise KubeConfigError(f"user {user}: exec plugin apiVersion {plugin.apiVersion!r} "
                                  f"is not one dispatch runs ({', '.join(EXEC_VERSIONS)})")
        self._plugin = plugin
        self._user = user
        self._now = now
        self._token: str | None = None
        self._expires: datetime | None = None

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response,
                                                              None]:
        fresh = self._token is None or (self._expires is not None
                                        and self._now() >= self._expires)
        if fresh:
            self._refresh()
        request.headers["Authorization"] = f"Bearer {self._token}"
        response = yield request
        if response.status_code == 401 and not fresh:  # revoked early: ask the plugin again
            self._refresh()
            request.headers["Authorization"] = f"Bearer {self._token}"
            yield request

    def _refresh(self) -> None:
        self._token, self._expires = run_plugin(self._plugin, self._user)


def run_plugin(plugin: UserExec, user: str,
               environ: Mapping[str, str] | None = None) -> tuple[str, datetime | None]:
    """The plugin's token and when it expires (None: until the API server refuses it)."""
    what = f"user {user}: exec plugin {plugin.command}"
    env = dict(os.environ if environ is None else environ)
    env.update((v.name, v.value) for v in plugin.env or ())
    env["KUBERNETES_EXEC_INFO"] = json.dumps({
        "apiVersion": plugin.apiVersion, "kind": "ExecCredential",
        "spec": {"interactive": False}})
    try:
        done = subprocess.run([plugin.command, *(plugin.args or ())], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=PLUGIN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise KubeConfigError(f"{what}: no answer in {PLUGIN_TIMEOUT_S:.0f} s") from None
    except OSError as err:
        hint = f" ({plugin.installHint.strip()})" if plugin.installHint else ""
        raise KubeConfigError(f"{what}: cannot run: {err.strerror}{hint}") from None
    if done.returncode != 0:
        words = done.stderr.decode("utf-8", "replace").strip()[-500:]
        raise KubeConfigError(f"{what}: exited {done.returncode}: {words or 'no words'}")
    return read_credential(done.stdout[:MOST_OUTPUT], plugin.apiVersion, what)


def read_credential(output: bytes, version: str, what: str) -> tuple[str, datetime | None]:
    """The token and expiry of the ExecCredential ``output``, which must be of ``version``."""
    try:
        cred: Any = json.loads(output)
    except ValueError:
        raise KubeConfigError(f"{what}: did not print an ExecCredential (not JSON: "
                              f"{output[:100]!r})") from None
    if not isinstance(cred, dict) or cred.get("kind") != "ExecCredential":
        raise KubeConfigError(f"{what}: did not print an ExecCredential")
    if cred.get("apiVersion") != version:
        raise KubeConfigError(f"{what}: printed an ExecCredential of {cred.get('apiVersion')!r}"
                              f", but the kubeconfig asks for {version!r}")
    status = cred.get("status")
    if not isinstance(status, dict):
        status = {}
    token = status.get("token")
    if not isinstance(token, str) or not token:
        raise KubeConfigError(f"{what}: its ExecCredential has no status.token (a client "
                              "certificate from a plugin is not supported)")
    stamp = status.get("expirationTimestamp")
    if stamp is None:
        return token, None
    try:
        expires = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        raise KubeConfigError(f"{what}: status.expirationTimestamp {stamp!r} is not an RFC "
                              "3339 time") from None
    if expires.tzinfo is None:
        raise KubeConfigError(f"{what}: status.expirationTimestamp {stamp!r} has no zone")
    return token, expires
