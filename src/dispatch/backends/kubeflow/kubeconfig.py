"""Where the Kubernetes configuration comes from, as kubectl finds it, and each kubeconfig file
read as dispatch may act on it.

The order (``load_kubeconfig``), kubectl's:

1. the file dispatch is told (``DISPATCH_KUBECONFIG``, ``KubeflowBackend(kubeconfig=)``),
   which must exist;
2. else every file ``$KUBECONFIG`` lists (``a:b``), merged: the first file to define a
   cluster, context or user by a name wins, as does the first ``current-context``; files
   that do not exist are skipped;
3. else ``~/.kube/config``;
4. else, in a pod, its service account (``KUBERNETES_SERVICE_HOST`` and its token mounted).

The context is ``DISPATCH_K8S_CONTEXT`` (``KubeflowBackend(context=)``) when set, else the
``current-context``.

Each file is a file only this user (or root) could have written or chosen, of a bounded size,
in the shape kubectl reads, or a ``KubeConfigError`` naming the file and what is wrong in it
(exit 2), never a traceback.

Why the trust rule: a kubeconfig is code and a destination. Its ``exec`` plugin runs as the
user who submits, and its API server receives the TrainJob with its environment (secrets).
A kubeconfig another user can write, or one reached through another user's link or directory,
is refused as dispatch refuses its own token file (``dispatch.support.trusted_files``).

Relative file names inside a kubeconfig (a CA, a client certificate or key, a token file, an
exec command with a ``/``) mean what kubectl makes them mean: relative to the kubeconfig's own
directory; they are made absolute here, so a configuration merged from several files needs no
file name to resolve them.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import yaml
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import Cluster, Context, User

from dispatch.errors import BackendError
from dispatch.support.files import read_at_most
from dispatch.support.trusted_files import UntrustedFile, open_trusted

# A kubeconfig holds a few certificates per cluster: tens of KiB. The bound keeps a file that
# is something else (a disk image, a log) from being read whole and parsed.
MOST_KUBECONFIG_BYTES = 4 << 20

_SECTIONS: tuple[tuple[str, str, type[Any]], ...] = (
    ("clusters", "cluster", Cluster),
    ("contexts", "context", Context),
    ("users", "user", User),
)


SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class KubeConfigError(BackendError):
    """No usable Kubernetes config here: the backend cannot be built (never a state)."""


class NoKubeConfig(KubeConfigError):
    """No configuration at all (no file, no pod's service account): a dry run can still show
    what it would send, in the namespace ``default``."""


@dataclass(frozen=True)
class KubeconfigFile:
    """What one kubeconfig file defines, every file name in it absolute."""

    path: Path
    clusters: dict[str, Cluster]
    contexts: dict[str, Context]
    users: dict[str, User]
    current_context: str | None


def read_kubeconfig(path: Path) -> KubeconfigFile:
    """The kubeconfig at ``path`` (trusted, bounded, well formed), else KubeConfigError.
    FileNotFoundError when there is no file there (the caller knows whether that is wrong)."""
    return decode_kubeconfig(_read_trusted(path), path)


def _read_trusted(path: Path) -> bytes:
    try:
        fd = open_trusted(path, "kubeconfig")
    except UntrustedFile as err:
        raise KubeConfigError(str(err)) from None
    except FileNotFoundError:
        raise
    except OSError as err:
        raise KubeConfigError(f"kubeconfig {path}: cannot open: {err.strerror}") from None
    try:
        os.set_blocking(fd, True)
        data = read_at_most(fd, MOST_KUBECONFIG_BYTES + 1)
    except OSError as err:
        raise KubeConfigError(f"kubeconfig {path}: cannot read: {err.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MOST_KUBECONFIG_BYTES:
        raise KubeConfigError(f"kubeconfig {path}: over {MOST_KUBECONFIG_BYTES >> 20} MiB, "
                              "which no kubeconfig is; not read")
    return data


def decode_kubeconfig(data: bytes, path: Path) -> KubeconfigFile:
    """The kubeconfig in ``data`` (the bytes of ``path``), else KubeConfigError naming
    ``path`` and what is wrong, where. Pure."""

    def wrong(what: str) -> KubeConfigError:
        return KubeConfigError(f"kubeconfig {path}: {what}")

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise wrong(f"not UTF-8 text (byte {err.start})") from None
    try:
        doc = yaml.load(text, Loader=yaml.CSafeLoader)  # noqa: S506 (the safe loader, in C)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise wrong(f"not valid YAML: {err.problem or err.context}{where}") from None
    except yaml.YAMLError as err:
        raise wrong(f"not valid YAML: {err}") from None
    except RecursionError:
        raise wrong("not valid YAML: nested too deeply") from None
    if doc is None:
        raise wrong("empty; a kubeconfig is a mapping with clusters, contexts and users")
    if not isinstance(doc, dict):
        raise wrong(f"holds {_kind(doc)}, not a kubeconfig (a mapping with clusters, contexts "
                    "and users)")
    sections: dict[str, dict[str, Any]] = {}
    for key, field, model in _SECTIONS:
        sections[key] = _section(doc, key, field, model, wrong)
    current = doc.get("current-context")
    if current is not None and not isinstance(current, str):
        raise wrong(f"current-context: expected a context's name, got {_kind(current)}")
    base = path.parent
    return KubeconfigFile(
        path=path,
        clusters={n: _absolute_cluster(c, base) for n, c in sections["clusters"].items()},
        contexts=sections["contexts"],
        users={n: _absolute_user(u, base) for n, u in sections["users"].items()},
        current_context=current or None,
    )


def _section(doc: dict[Any, Any], key: str, field: str, model: type[Any],
             wrong: Any) -> dict[str, Any]:
    items = doc.get(key)
    if items is None:
        return {}
    if not isinstance(items, list):
        raise wrong(f"{key}: expected a list of {{name: ..., {field}: {{...}}}}, got "
                    f"{_kind(items)}")
    found: dict[str, Any] = {}
    for n, item in enumerate(items):
        where = f"{key}[{n}]"
        if not isinstance(item, dict):
            raise wrong(f"{where}: expected {{name: ..., {field}: {{...}}}}, got {_kind(item)}")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise wrong(f"{where}.name: expected a non-empty string, got {_kind(name)}")
        if name in found:
            raise wrong(f"{where}: the name {name!r} appears twice in {key}")
        body = item.get(field)
        if not isinstance(body, dict):
            raise wrong(f"{where}.{field} ({name}): expected a mapping, got {_kind(body)}")
        try:
            value = msgspec.convert(body, model)
        except msgspec.ValidationError as err:
            words, _, at = str(err).partition(" - at `$")
            raise wrong(f"{where}.{field}{at.rstrip('`')} ({name}): {words}") from None
        _check_base64(value, f"{where}.{field}", name, wrong)
        found[name] = value
    return found


def _check_base64(value: Any, where: str, name: str, wrong: Any) -> None:
    """The ``*-data`` fields are base64 (PEM inside): refused here rather than when the
    client is built."""
    for attr, key in (("certificate_auth_data", "certificate-authority-data"),
                      ("client_cert_data", "client-certificate-data"),
                      ("client_key_data", "client-key-data")):
        data = getattr(value, attr, None)
        if data is None:
            continue
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise wrong(f"{where}.{key} ({name}): not base64") from None


def _absolute(name: str | None, base: Path) -> str | None:
    if name is None or not name or os.path.isabs(name):
        return name
    return str(base / name)


def _absolute_cluster(cluster: Cluster, base: Path) -> Cluster:
    return msgspec.structs.replace(
        cluster, certificate_auth=_absolute(cluster.certificate_auth, base))


def _absolute_user(user: User, base: Path) -> User:
    user = msgspec.structs.replace(
        user,
        client_cert=_absolute(user.client_cert, base),
        client_key=_absolute(user.client_key, base),
        token_file=_absolute(user.token_file, base),
    )
    if user.exec is not None and "/" in user.exec.command:  # a bare name is looked up on PATH
        user = msgspec.structs.replace(user, exec=msgspec.structs.replace(
            user.exec, command=_absolute(user.exec.command, base)))
    return user


def _kind(value: Any) -> str:
    """What a YAML value is, in words, for an error."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"text ({len(value)} characters: {shown!r})"
    if isinstance(value, list):
        return f"a list ({len(value)} items)"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def load_kubeconfig(explicit: str | None, context: str | None,
                    service_account_dir: str = SERVICE_ACCOUNT_DIR,
                    env: Mapping[str, str] = os.environ) -> SingleConfig:
    """The configuration kubectl would use here (the module's order), with ``context`` (None:
    the current-context); KubeConfigError naming what is missing or wrong."""
    return load_with_files(explicit, context, service_account_dir, env)[0]


def load_with_files(explicit: str | None, context: str | None,
                    service_account_dir: str = SERVICE_ACCOUNT_DIR,
                    env: Mapping[str, str] = os.environ,
                    ) -> tuple[SingleConfig, tuple[Path, ...]]:
    """``load_kubeconfig``'s configuration, and the kubeconfig files it merged, in order
    (none: the pod's service account), for saying where it came from (origin.py)."""
    files, looked = _kubeconfig_files(explicit, env)
    if files:
        merged = merge([_read_existing(p) for p in files])
        return select_context(merged, context), merged.files
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"):
        if context is not None:
            raise KubeConfigError(f"context {context!r} is asked for, but there is no kubeconfig"
                                  f" ({looked}); in this pod only its service account is there")
        return _service_account(Path(service_account_dir), env), ()
    raise NoKubeConfig(f"no Kubernetes configuration: {looked}, and this is no pod with a "
                          "service account (KUBERNETES_SERVICE_HOST is unset); name a "
                          "kubeconfig file with DISPATCH_KUBECONFIG (or KUBECONFIG) and, "
                          "if not its current-context, the context with DISPATCH_K8S_CONTEXT")


def _service_account(account: Path, env: Mapping[str, str]) -> SingleConfig:
    """The pod's own config, as lightkube's ``from_service_account`` makes it (the token file
    is read again when the API server answers 401: the kubelet rotates it), from ``env``."""
    try:
        namespace = (account / "namespace").read_text().strip()
        (account / "token").stat()
    except OSError as err:
        raise KubeConfigError(f"the pod's service account {account}: cannot read "
                              f"{err.filename}: {err.strerror}") from None
    host, port = env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]
    host = f"[{host}]" if ":" in host else host  # IPv6
    config = KubeConfig.from_one(
        cluster=Cluster(server=f"https://{host}:{port}",
                        certificate_auth=str(account / "ca.crt")),
        user=User(token_file=str(account / "token")), namespace=namespace or None)
    return config.get()  # type: ignore[return-value]  # from_one sets the current context


def _kubeconfig_files(explicit: str | None,
                      env: Mapping[str, str]) -> tuple[list[Path], str]:
    """The kubeconfig files to read, in order, and where was looked (for an error)."""
    if explicit:
        return [Path(explicit)], ""
    listed = env.get("KUBECONFIG", "")
    if listed:
        names = list(dict.fromkeys(n for n in listed.split(os.pathsep) if n))
        paths = [Path(os.path.abspath(n)) for n in names]
        return ([p for p in paths if _exists(p)],
                f"no file KUBECONFIG names exists ({', '.join(map(str, paths))})")
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    default = home / ".kube" / "config"
    return ([default] if _exists(default) else [],
            f"KUBECONFIG is unset and {default} does not exist")


def _exists(path: Path) -> bool:
    return os.path.lexists(path)  # a dangling link is there: reading it says what is wrong


def _read_existing(path: Path) -> KubeconfigFile:
    try:
        return read_kubeconfig(path)
    except FileNotFoundError:
        raise KubeConfigError(f"kubeconfig {path} does not exist") from None
    except NotADirectoryError as err:
        raise KubeConfigError(f"kubeconfig {path}: {err.filename} is not a directory") from None


@dataclass(frozen=True)
class MergedKubeconfig:
    """Several kubeconfig files as one, kubectl's way; ``origin`` says which file gave each
    context (for errors and the config's file name)."""

    files: tuple[Path, ...]
    clusters: dict[str, Cluster]
    contexts: dict[str, Context]
    users: dict[str, User]
    current_context: str | None
    origin: dict[str, Path]


def merge(files: Sequence[KubeconfigFile]) -> MergedKubeconfig:
    """The first file to define a name wins, and the first current-context. Pure."""
    clusters: dict[str, Cluster] = {}
    contexts: dict[str, Context] = {}
    users: dict[str, User] = {}
    origin: dict[str, Path] = {}
    current: str | None = None
    for f in files:
        for name, cluster in f.clusters.items():
            clusters.setdefault(name, cluster)
        for name, ctx in f.contexts.items():
            if name not in contexts:
                contexts[name] = ctx
                origin[name] = f.path
        for name, user in f.users.items():
            users.setdefault(name, user)
        current = current or f.current_context
    return MergedKubeconfig(tuple(f.path for f in files), clusters, contexts, users, current,
                            origin)


def select_context(config: MergedKubeconfig, context: str | None) -> SingleConfig:
    """The cluster and user of ``context`` (None: the current-context). Pure."""
    where = ", ".join(map(str, config.files))
    name = context or config.current_context
    if name is None:
        raise KubeConfigError(f"kubeconfig {where}: no current-context, and "
                              "DISPATCH_K8S_CONTEXT is unset: set one of them")
    ctx = config.contexts.get(name)
    if ctx is None:
        known = ", ".join(sorted(config.contexts)) or "none"
        asked = "DISPATCH_K8S_CONTEXT" if context else "current-context"
        raise KubeConfigError(f"kubeconfig {where}: {asked} {name!r} is no context there "
                              f"(contexts: {known})")
    cluster = config.clusters.get(ctx.cluster)
    if cluster is None:
        raise KubeConfigError(f"kubeconfig {where}: context {name!r} names cluster "
                              f"{ctx.cluster!r}, which none of them defines")
    user = User()
    if ctx.user:
        found = config.users.get(ctx.user)
        if found is None:
            raise KubeConfigError(f"kubeconfig {where}: context {name!r} names user "
                                  f"{ctx.user!r}, which none of them defines")
        user = found
    return SingleConfig(context_name=name, context=ctx, cluster=cluster, user=user,
                        fname=config.origin[name])
