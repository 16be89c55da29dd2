"""Which job a reference means: a job id, a name, or an id prefix. One place, so the CLI,
the Python API and the HTTP API's ``{job}`` mean the same job by the same words.

- an id is that job;
- a name is the newest job of its supersede chain (running a job again keeps its name, and
  the name goes on meaning the job you would look at); only unrelated jobs sharing a name
  are ambiguous, and the error lists them (id, state, created);
- a prefix of at least ``MIN_PREFIX`` characters of exactly one job's id is that job.

A name wins over a prefix it happens to spell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from dispatch.stores.base import MIN_PREFIX, AmbiguousName, JobMatch, JobNotFound

# Most jobs an ambiguity error lists; the store is asked for one more, to say "more".
LISTED = 20


def choose(ref: str, found: Sequence[JobMatch],
           describe: Callable[[Sequence[JobMatch]], list[str]],
           names: Callable[[], Iterable[str]] = tuple) -> str:
    """The one job ``ref`` means among the store's ``found`` matches; JobNotFound when none
    (naming the closest of the jobs' ``names``: did you mean ...?), AmbiguousName (listing
    each candidate, as ``describe`` says it) when several."""
    for how in ("id", "name", "prefix"):
        these = [m for m in found if m.how == how]
        if len(these) == 1:
            return these[0].job_id
        if these:
            shown = list(these[:LISTED])
            lines = describe(shown)
            if len(these) > LISTED:
                lines.append("... and more")
            what = "name" if how == "name" else "id prefix"
            raise AmbiguousName(ref, [m.job_id for m in shown], lines, what=what)
    hint = "" if len(ref) >= MIN_PREFIX else \
        f" (an id prefix needs at least {MIN_PREFIX} characters)"
    raise JobNotFound(ref + hint + did_you_mean(ref, names()))


def did_you_mean(ref: str, names: Iterable[str]) -> str:
    """`` (did you mean 'training-nan'?)`` for a name close to ``ref`` (at most three, the
    closest first), as an unknown command gets; empty when none is close."""
    import difflib

    near = difflib.get_close_matches(ref, sorted(set(names)), n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""
