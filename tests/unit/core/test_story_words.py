"""Issue 39 item 2: an event written before its act says the act was decided, never that it
happened; what the scheduler shows afterwards says it did (docs/semantics.md#record-words)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dispatch.core import events as ev
from dispatch.core.model import Cause, CauseKind, Provenance
from dispatch.core.story import line

AT = datetime(2026, 12, 3, tzinfo=UTC)
CAUSE = Cause(kind=CauseKind.NODE_LOST, provenance=Provenance.SCHEDULER)


@pytest.mark.parametrize(("event", "says", "never"), [
    (ev.CancelSent(seq=5, at=AT, ref="l-1"), "cancel ordered for object l-1", "sent"),
    (ev.StopRequested(seq=5, at=AT, submission=1, ref="l-1", cause=CAUSE),
     "stop ordered for object l-1", "requested"),
    (ev.DuplicateStopped(seq=5, at=AT, ref="l-2", token="j.1", cause=CAUSE),
     "stop ordered", ") stopped"),
    (ev.SubmissionAttempted(seq=5, at=AT, submission=2, supervisor="h:1"),
     "submission 2: submit to be retried", "retried by"),
    (ev.SubmissionIntended(seq=5, at=AT, submission=2, token="j.2"), "submission 2 intended",
     "submitted"),
    (ev.SegmentPublished(seq=5, at=AT, unit_job_id="42", task_id="1", reason="drained"),
     "unit 42.1 decided unavailable", "marked"),
])
def test_an_intent_says_what_was_decided(event: ev.Event, says: str, never: str) -> None:
    text = line(event)
    assert says in text and never not in text, text


def test_what_the_scheduler_showed_says_it_happened() -> None:
    assert line(ev.SubmissionBound(seq=5, at=AT, submission=1, ref="l-1")) == \
        "submission 1 is scheduler object l-1"
    assert line(ev.GateOpened(seq=5, at=AT, submission=2, ref="l-2")).startswith("gate opened")
