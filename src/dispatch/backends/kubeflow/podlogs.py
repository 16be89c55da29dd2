"""A TrainJob's output: the logs of its pods, read through the API server
(``GET /api/v1/namespaces/{ns}/pods/{pod}/log``), one ``LogReader`` per pod.

Reading is incremental without re-reading a whole log each poll: every read asks with
``timestamps=true`` and, after the first, ``sinceTime`` = S, the whole second of the last line
taken. The kubelet drops each line stamped before S, line by line, and gives the rest in the
file's order: so the answer begins with exactly the lines taken before that are stamped S or
later, and the cursor (S and how many those are) skips that many lines, whatever their stamps.
Skipping by stamp instead lost lines: the container runtime stamps stdout and stderr in two
threads, so a line can follow one stamped a little later (a print after torchrun's stderr, on
a real node). One reordered across a second's boundary is still lost (the kubelet drops
it). Each answer is bounded by ``limitBytes``; a read cut there asks again from where it got,
so a long log comes in pages (bigger ones when a page holds nothing new: a burst within one
second, a very long line).

What is not an error: a pod whose container has not started (400 "is waiting to start"), a
pod already gone (404) or one not yet scheduled (an empty log) reads as nothing this time.
Known limits: a pod's log is readable only while the pod exists (deleting a TrainJob deletes
its pods and their logs); one line longer than ``MOST_BYTES`` is cut there, and of more than
``MOST_BYTES`` written within one second the rest of that second is skipped.

The stamp arithmetic (``take``, ``parse_stamp``) is pure; ``PodLog.read`` makes the calls.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dispatch.backends.base import LogRead
from dispatch.backends.kubeflow.client import ApiAnswer, KubeClient
from dispatch.backends.kubeflow.objects import (
    COMPLETION_INDEX_LABEL,
    JOB_INDEX_LABEL,
    as_list,
    as_map,
    as_str,
    labels,
    meta,
    name_of,
)
from dispatch.backends.kubeflow.pods import restart_attempt

LIMIT_BYTES = 4 << 20  # one answer's size; a longer log comes in several
MOST_BYTES = 64 << 20  # pages grow to this when one page holds nothing new
MAX_PAGES = 64  # answers per read at most; the next read goes on from there
READ_BYTES = 16 << 20  # one read stops past this much (``LogRead.more``): bounded memory
TRAINER_CONTAINER = "node"  # the container Kubeflow Trainer runs the trainer in

Stamp = tuple[int, int]  # seconds since the epoch, nanoseconds
Place = tuple[Stamp, int]  # the second asked from, and how many lines from it were taken

_STAMP = re.compile(
    rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$"
)


def parse_stamp(text: bytes) -> Stamp | None:
    """An RFC 3339 stamp as the kubelet writes it (nanoseconds, trailing zeros trimmed)."""
    m = _STAMP.match(text)
    if m is None:
        return None
    zone = "+00:00" if m.group(3) == b"Z" else m.group(3).decode()
    try:
        at = datetime.fromisoformat(m.group(1).decode() + zone)
    except ValueError:
        return None
    return int(at.timestamp()), int((m.group(2) or b"0").ljust(9, b"0"))


def since_time(stamp: Stamp) -> str:
    """``sinceTime`` for a stamp: its whole second, as the API server forwards it anyway."""
    return datetime.fromtimestamp(stamp[0], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def encode(place: Place | None) -> str | None:
    if place is None:
        return None
    (seconds, nanos), count = place
    return f"{seconds}.{nanos:09d} {count}"


def decode(cursor: str | None) -> Place | None:
    """A cursor this module made; anything else starts from the log's beginning."""
    if not cursor:
        return None
    try:
        stamp, count = cursor.split(" ")
        seconds, nanos = stamp.split(".")
        return (int(seconds), int(nanos)), int(count)
    except ValueError:
        return None


@dataclass(frozen=True)
class Taken:
    data: bytes  # the lines taken, without their stamps
    place: Place | None  # where the next read starts
    held_fresh: bool  # a last line without its end, not taken before, was left for later


def take(body: bytes, place: Place | None, *, whole: bool) -> Taken:
    """The lines of ``body`` (a log read with timestamps from ``place``'s second on) not taken
    before, without their stamps, and the place after them. A last line without its end is
    taken only when ``whole`` (the log holds no more of it), else held back.

    A line whose stamp cannot be read is taken as written and counts with the stamp before it
    (the kubelet stamps every line; this only keeps a stranger answer from looping)."""
    out: list[bytes] = []
    skip = place[1] if place is not None else 0
    stamps: list[Stamp] = []  # every whole line of the answer, repeated ones first
    last: Stamp | None = place[0] if place is not None else None
    held = False
    for entry in body.splitlines(keepends=True):
        if not entry.endswith(b"\n") and not whole:
            # Fresh unless lines taken before remain to be skipped before it.
            held = len(stamps) >= skip
            break
        head, sep, rest = entry.partition(b" ")
        stamp = parse_stamp(head) if sep else None
        if stamp is None:
            stamp, rest = last or (0, 0), entry
        last = stamp
        stamps.append(stamp)
        if len(stamps) > skip:
            out.append(rest if rest.endswith(b"\n") else rest + b"\n")
    if last is None or len(stamps) <= skip:
        return Taken(b"", place, held_fresh=held)  # nothing new: the same place
    # The last line's second, never before the one this answer began at (the lines it holds
    # are all of those stamped since)
    since = last[0] if place is None else max(place[0][0], last[0])
    return Taken(b"".join(out), ((since, 0), sum(1 for t in stamps if t >= (since, 0))),
                 held_fresh=held)


@dataclass(frozen=True)
class PodLog:
    """One pod's log (one container's) through the API server: a ``LogReader``."""

    kube: KubeClient
    namespace: str
    pod: str
    uid: str
    container: str | None
    limit_bytes: int = LIMIT_BYTES
    most_bytes: int = MOST_BYTES
    read_bytes: int = READ_BYTES

    @property
    def key(self) -> str:
        return f"pod/{self.namespace}/{self.pod}/{self.uid}/{self.container or ''}"

    @property
    def label(self) -> str:
        return self.pod

    def read(self, cursor: str | None, *, final: bool) -> LogRead:
        place = decode(cursor)
        pages: list[bytes] = []
        limit = self.limit_bytes
        taken = 0
        more = False
        for _ in range(MAX_PAGES):
            body = self._ask(place, limit)
            if body is None:
                break
            cut = len(body) >= limit
            got = take(body, place, whole=final and not cut)
            if cut and got.place == place:
                # A full page and nothing new in it: more than a page within one second, or
                # one line longer than a page. Ask for bigger pages, up to the most.
                if limit < self.most_bytes:
                    limit = min(limit * 4, self.most_bytes)
                    continue
                if got.held_fresh:  # one line longer than the most: cut there
                    got = take(body, place, whole=True)
                elif place is not None:  # the most within one second: on to the next one
                    got = Taken(b"", ((place[0][0] + 1, 0), 0), held_fresh=False)
            pages.append(got.data)
            taken += len(got.data)
            progressed = got.place != place
            place = got.place
            if not cut or not progressed:
                break
            if taken >= self.read_bytes:
                more = True  # the rest at the next read, at once: never all in memory
                break
        return LogRead(b"".join(pages), encode(place), more)

    def _ask(self, place: Place | None, limit: int) -> bytes | None:
        params = {"timestamps": "true", "limitBytes": str(limit)}
        if self.container is not None:
            params["container"] = self.container
        if place is not None:
            params["sinceTime"] = since_time(place[0])
        try:
            return self.kube.pod_log(self.namespace, self.pod, params)
        except ApiAnswer as err:
            if err.code in (400, 404):  # not started yet, or gone: nothing to read now
                return None
            raise


def trainer_container(pod: Any) -> str | None:
    """The trainer's container ("node", as Trainer names it), else the pod's first; None when
    the pod names none (the API server then picks its only one)."""
    names = [as_str(as_map(c).get("name")) for c in as_list(as_map(as_map(pod).get("spec"))
                                                           .get("containers"))]
    named = [n for n in names if n]
    if TRAINER_CONTAINER in named:
        return TRAINER_CONTAINER
    return named[0] if named else None


def _index(pod: Any, label: str) -> int:
    text = as_str(labels(pod).get(label)) or ""
    return int(text) if text.isdigit() else 0


def pod_order(pod: Any) -> tuple[int, int, int, str]:
    """Node 0 first: restart attempt, job index, completion index, then the name."""
    return (restart_attempt(pod) or 0, _index(pod, JOB_INDEX_LABEL),
            _index(pod, COMPLETION_INDEX_LABEL), name_of(pod))


def pod_logs(kube: KubeClient, namespace: str, pods: Iterable[Any]) -> list[PodLog]:
    """One reader per pod of a TrainJob, node 0 first."""
    return [
        PodLog(kube, namespace, name_of(p), str(meta(p).get("uid") or ""), trainer_container(p))
        for p in sorted(pods, key=pod_order)
    ]


# The end of a failed container's log read for its error (issue 23), as the output tail of a
# Slurm or local node is: at most this many lines and bytes. torchrun's "Root Cause" block
# (the failing rank, its exit) ends the log with the worker's whole traceback: 24 lines from
# the end for a 12-frame stack on real torchrun (tests/fixtures/torchrun-c10d), so 20 lines
# lost the rank; the bounds are the Slurm reader's (capture/app_error.py).
TAIL_LINES = 200
TAIL_BYTES = 64 * 1024


def log_tail(kube: KubeClient, namespace: str, pod: str, container: str | None) -> str:
    """The last lines of one container's log (``tailLines``, ``limitBytes``); empty when the
    API server has none to give (400: no such container or not started; 404: the pod is gone).
    SchedulerUnreachable passes through: the caller asks again at the next look."""
    params = {"tailLines": str(TAIL_LINES), "limitBytes": str(TAIL_BYTES)}
    if container:
        params["container"] = container
    try:
        data = kube.pod_log(namespace, pod, params)
    except ApiAnswer as err:
        if err.code in (400, 404):
            return ""
        raise
    return data[-TAIL_BYTES:].decode(errors="replace")
