"""One kubeconfig file, read as dispatch may act on it: a file only this user (or root) could
have written or chosen, a bounded size, and the shape kubectl reads, or a ``KubeConfigError``
naming the file and what is wrong in it (exit 2), never a traceback.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import yaml
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


class KubeConfigError(BackendError):
    """No usable Kubernetes config here: the backend cannot be built (never a state)."""


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
        raise KubeConfigError(f"{err}; it is not used") from None
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
