"""The nodes one execution ran on, from Slurm's several views of it.

While a job ends, every view of its allocation can be short for a moment: squeue's NodeList
shrinks while the job is COMPLETING, each node leaving as its epilog ends (Slurm 26.05 and
22.05 showed ``n2`` of ``n[2-3]``), and accounting's job row can say the same shrunken list
in the seconds after the end (22.05: the job row ``n2`` beside its step 0 on ``n[2-3]``; a
later ``sacct`` said ``n[2-3]``). Each view is a part of the allocation (a step runs only on
the job's nodes), so their union is the allocation as far as any view knows it.
"""

from __future__ import annotations

from collections.abc import Iterable

from dispatch.backends.slurm.ids import expand_nodelist


def node_names(text: str) -> tuple[str, ...]:
    """One NodeList, expanded; a list that cannot be read is kept as its words."""
    try:
        return expand_nodelist(text)
    except ValueError:
        return (text,)  # keep the words rather than guess at names


def allocation(views: Iterable[str]) -> tuple[str, ...]:
    """The union of NodeLists of one execution, in the order of the longest (the others
    usually add nothing), then any name it lacks in the order seen."""
    expanded = sorted((node_names(v) for v in views), key=len, reverse=True)
    return tuple(dict.fromkeys(n for names in expanded for n in names))
