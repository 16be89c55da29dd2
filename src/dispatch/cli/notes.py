"""What the read commands say on stderr besides their answer (issue 36): that no live
supervisor serves a job's scope (so nothing will happen to it until one runs) and what to run,
and how many finished jobs a bare ``ls`` hides and how to see them.

The wording is pure (``unserved_lines``, ``hidden_line``); the look-ups read the store's leases
and jobs table only, never a scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dispatch.service import Service
    from dispatch.service.views import JobView


def job_scope(view: JobView) -> str | None:
    """The scope a supervisor must serve for this job to move; None for a finished job (or
    one whose record cannot be read: its problem is shown instead)."""
    s = view.status
    if s is None or s.state.terminal:
        return None
    return s.scope or s.backend


def served_scopes(service: Service) -> set[str]:
    """The scopes whose lease is active now (the store's clock)."""
    return {lease.scope for lease in service.store.leases().all() if lease.active}


def unserved_lines(waiting: dict[str, int]) -> list[str]:
    """``waiting``: unfinished jobs by a scope nobody serves. One line a scope, then what to
    run for all of them."""
    if not waiting:
        return []
    lines = [f"note: no live supervisor serves scope {scope} ({n} unfinished "
             f"job{'s' if n != 1 else ''}): nothing happens to "
             f"{'them' if n != 1 else 'it'} until one runs"
             for scope, n in sorted(waiting.items())]
    scopes = " ".join(f"--scope {s}" for s in sorted(waiting))
    lines.append(f"      run `dispatch supervise {scopes}` (or `dispatch serve`, which "
                 "supervises too); `dispatch supervisors` shows who serves what")
    return lines


def unsupervised_notes(service: Service, views: Iterable[JobView]) -> list[str]:
    """The notes for the unfinished jobs among ``views`` that no live supervisor serves."""
    waiting: dict[str, int] = {}
    for v in views:
        scope = job_scope(v)
        if scope is not None:
            waiting[scope] = waiting.get(scope, 0) + 1
    if not waiting:
        return []
    served = served_scopes(service)
    return unserved_lines({s: n for s, n in waiting.items() if s not in served})


def hidden_line(hidden: int, filters: Sequence[str]) -> list[str]:
    """A bare ``ls``'s word on the finished jobs it does not show."""
    if not hidden:
        return []
    again = " ".join(["dispatch ls", *filters])
    them = "them" if hidden != 1 else "it"
    return [f"{hidden} finished job{'s' if hidden != 1 else ''} not shown: `{again} --all` "
            f"shows {them} (`{again} --state failed` only the failed ones)"]


def hidden_note(service: Service, *, backend: str | None, name: str | None,
                since_us: int | None, filters: Sequence[str]) -> list[str]:
    """How many finished jobs a bare ``ls`` with these filters hides (the jobs table's
    ``terminal`` column: no record is read)."""
    from dispatch.stores.query import JobQuery

    rows = service.store.query_jobs(JobQuery(terminal=True, backend=backend, name_glob=name,
                                             since_us=since_us))
    return hidden_line(len(rows), filters)
