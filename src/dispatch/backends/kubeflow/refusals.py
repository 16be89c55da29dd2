"""The API server's refusals of a look's reads (403 on a list or a watch of TrainJobs,
JobSets, Jobs, pods, Events or nodes), never silent (issue 47).

A refused collection only makes a look incomplete (or reads as no nodes, no Events), so
without this a user short of one permission saw jobs that never moved and no word why. Each
refusal is logged once per collection, in the API server's words with what it costs
(``permissions.PERMISSIONS``), and once more when it is allowed again; ``counts`` counts each
time a collection went from allowed to refused (the ``dispatch_scheduler_refusals`` metric);
``current`` is what is refused now, and ``report`` the same as data (core/refusals.py: the
verb, the API server's words, what it costs, since when), which the active supervisor
publishes for ``dispatch supervisors`` and the notes of its jobs' ``status``.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime

from dispatch.backends.kubeflow.client import ApiAnswer
from dispatch.backends.kubeflow.informer import Watched
from dispatch.backends.kubeflow.permissions import needed_for
from dispatch.core.refusals import Refusal

log = logging.getLogger("dispatch.backends.kubeflow")


def plural_of(w: Watched) -> tuple[str, str]:
    info = w.res._api_info
    return info.resource.group, info.plural


def cost_of(w: Watched) -> str:
    """What dispatch does not see while ``w`` is refused. Pure."""
    group, plural = plural_of(w)
    p = needed_for("list", group, plural)
    return p.without if p is not None else "the look is incomplete"


def note_of(refused: Mapping[str, str]) -> str:
    """One line for a job's note: the collections refused and the API server's words. Pure."""
    return "; ".join(f"{what} refused ({words})" for what, words in sorted(refused.items()))


class Refusals:
    """What the API server refuses now, per collection; thread-safe (the informer's threads
    and the supervisor's share a backend)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now: dict[str, str] = {}  # collection -> the API server's words
        self._report: dict[str, Refusal] = {}  # collection -> the same, as data
        self.counts: Counter[str] = Counter()  # plural -> times it went refused

    def seen(self, refused: Mapping[Watched, ApiAnswer], asked: set[Watched]) -> None:
        """After a look: ``refused`` the collections it was refused, ``asked`` all it read."""
        with self._lock:
            for w, err in refused.items():
                words = f"{err.code} {err.reason}: {err.message}".strip()
                if w.what not in self._now:
                    self.counts[plural_of(w)[1]] += 1
                    log.warning("kubeflow: the API server refuses to read %s: %s; until it "
                                "allows it, %s (`dispatch doctor --backend kubeflow` says "
                                "what RBAC fixes it)", w.what, words, cost_of(w))
                self._now[w.what] = words
                was = self._report.get(w.what)
                self._report[w.what] = Refusal(
                    resource=w.what, verb=err.verb, words=words, cost=cost_of(w),
                    since=was.since if was is not None else datetime.now(UTC))
            for w in asked - set(refused):
                self._report.pop(w.what, None)
                if self._now.pop(w.what, None) is not None:
                    log.warning("kubeflow: the API server allows reading %s again", w.what)

    def current(self) -> dict[str, str]:
        with self._lock:
            return dict(self._now)

    def report(self) -> list[Refusal]:
        """What is refused now, as data (the backend's ``refused_reads``)."""
        with self._lock:
            return sorted(self._report.values(), key=lambda r: r.resource)
