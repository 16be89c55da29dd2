"""ChangeJournal: what a backend that reports changes hands out at each look."""

from __future__ import annotations

from dispatch.backends.base import ChangeJournal


def test_the_first_look_cannot_tell_then_each_look_names_what_changed_since_the_last() -> None:
    journal = ChangeJournal()
    journal.note("obj-1", None)
    assert journal.take() is None  # no previous look: "cannot tell", compare everything
    first = journal.last_look
    journal.note("obj-2", "job.1")
    changes = journal.take()
    assert changes is not None
    assert changes.since == first and changes.look == journal.last_look
    assert changes.keys == frozenset({"obj-2", "job.1"})
    quiet = journal.take()
    assert quiet is not None and quiet.keys == frozenset() and quiet.since == changes.look


def test_two_journals_never_hand_out_the_same_look() -> None:
    a, b = ChangeJournal(), ChangeJournal()
    a.take()
    b.take()
    assert a.last_look != b.last_look
