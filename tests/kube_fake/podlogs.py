"""The stand-in's pod logs: what a simulated container "printed" (tests write it with
``FakeApiServer.write_log``) and ``GET /api/v1/namespaces/{ns}/pods/{pod}/log`` as the API
server and the kubelet answer it.

- 200 ``text/plain``: the container's lines, each stamped (RFC 3339 with nanoseconds, trailing
  zeros trimmed, as Go's RFC3339Nano writes) when ``timestamps=true`` (a partial line's
  continuation is not stamped again, as the kubelet writes it); ``sinceTime`` keeps the
  lines stamped at or after it, taken at whole seconds because that is how the API server
  forwards it to the kubelet; ``tailLines`` the last N; ``limitBytes`` cuts the answer.
  A pod not yet scheduled (no ``spec.nodeName``) has an empty log.
- 400 ``Status`` (reason BadRequest) with the kubelet's words: a container that has not
  started (``container "node" in pod "p" is waiting to start: ContainerCreating``), one the
  pod has no status for, a container name the pod does not have, no name for a pod with several.
- 404 ``Status`` for a pod that does not exist (its logs go with it: they are kept by uid).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


class LogRefused(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def stamp_text(at_ns: int) -> str:
    """Go's time.RFC3339Nano in UTC: nanoseconds with trailing zeros trimmed."""
    seconds, nanos = divmod(at_ns, 1_000_000_000)
    base = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{nanos:09d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


def parse_since(text: str) -> int:
    """``sinceTime`` (RFC 3339, a fraction allowed) as nanoseconds, cut to its whole second."""
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if at.tzinfo is None:
        raise ValueError(f"no zone in {text!r}")
    return int(at.timestamp()) * 1_000_000_000


def at_ns(at: datetime | str | int | None) -> int:
    if at is None:
        return time.time_ns()
    if isinstance(at, int):
        return at
    if isinstance(at, str):
        head, _, frac = at.rstrip("Z").partition(".")
        whole = int(datetime.fromisoformat(head + "+00:00").timestamp())
        return whole * 1_000_000_000 + int(frac.ljust(9, "0") or 0)
    return int(at.timestamp()) * 1_000_000_000 + at.microsecond * 1000


def _containers(pod: Mapping[str, Any]) -> list[str]:
    spec = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    statuses = [c.get("name") for c in (pod.get("status") or {}).get("containerStatuses") or []]
    return [n for n in spec or statuses if isinstance(n, str)]


def container_of(pod: Mapping[str, Any], asked: str | None) -> str:
    """The container a log request means, or the API server's refusal."""
    name = pod["metadata"]["name"]
    names = _containers(pod)
    if asked:
        if names and asked not in names:
            raise LogRefused(400, "BadRequest", f"container {asked} is not valid for pod {name}")
        return asked
    if len(names) == 1:
        return names[0]
    if not names:
        raise LogRefused(400, "BadRequest", f"pod {name} has no containers")
    raise LogRefused(400, "BadRequest", f"a container name must be specified for pod {name}, "
                                        f"choose one of: [{' '.join(names)}]")


def _started(pod: Mapping[str, Any], container: str) -> None:
    """The kubelet's validateContainerLogStatus: a container with no state to read refuses."""
    name = pod["metadata"]["name"]
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    cs = next((c for c in statuses if c.get("name") == container), None)
    if cs is None:
        raise LogRefused(400, "BadRequest",
                         f'container "{container}" in pod "{name}" is not available')
    state, last = cs.get("state") or {}, cs.get("lastState") or {}
    if "running" in state or "terminated" in state or "terminated" in last:
        return
    reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
    raise LogRefused(400, "BadRequest",
                     f'container "{container}" in pod "{name}" is waiting to start: {reason}')


class PodLogs:
    """Every simulated container's output: (pod uid, container) -> [(stamp ns, bytes)]."""

    def __init__(self) -> None:
        self._lines: dict[tuple[str, str], list[tuple[int, bytes]]] = {}

    def write(self, pod: Mapping[str, Any], text: str | bytes, *, container: str | None,
              at: datetime | str | int | None) -> None:
        """The container printed ``text``: one entry per line, all stamped ``at`` (default:
        now); a last piece without its line end is an entry of its own, as the runtime logs
        a partial line."""
        name = container or container_of(pod, None)
        data = text.encode() if isinstance(text, str) else text
        stamp = at_ns(at)
        entries = self._lines.setdefault((pod["metadata"]["uid"], name), [])
        entries.extend((stamp, line) for line in data.splitlines(keepends=True))

    def answer(self, pod: Mapping[str, Any], query: Mapping[str, str]) -> bytes:
        container = container_of(pod, query.get("container"))
        if not (pod.get("spec") or {}).get("nodeName"):
            return b""  # not scheduled: the API server streams nothing
        _started(pod, container)
        entries = list(self._lines.get((pod["metadata"]["uid"], container), []))
        try:
            if query.get("sinceTime"):
                since = parse_since(query["sinceTime"])
                entries = [e for e in entries if e[0] >= since]
            if query.get("tailLines") is not None:
                tail = int(query["tailLines"])
                entries = entries[-tail:] if tail else []
            limit = int(query["limitBytes"]) if query.get("limitBytes") else None
        except ValueError as err:
            raise LogRefused(400, "BadRequest", f"bad log options: {err}") from None
        stamped = query.get("timestamps") in ("true", "1")
        out, new_line = [], True
        for t, line in entries:
            # As the kubelet writes: a partial line's continuation carries no stamp of its own.
            out.append((stamp_text(t).encode() + b" " if stamped and new_line else b"") + line)
            new_line = line.endswith(b"\n")
        body = b"".join(out)
        return body[:limit] if limit is not None else body
