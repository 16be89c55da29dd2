"""`segment mark` / `clear` under arbitrary --task and --reason (issue 13): every input is
either carried out (file written, then recorded) or refused with a typed bad-input error that
writes and records nothing. Never another exception; the record and the directory agree.
Real SQLite store, real directory."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.specs import parse_spec

from dispatch.backends.registry import declarations_for
from dispatch.core import events as ev
from dispatch.core.record import fold
from dispatch.errors import BadInput
from dispatch.segment_health.commands import mark, unmark
from dispatch.service.requests import create_job
from dispatch.stores.base import RecordStore
from dispatch.stores.select import open_store

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)

tasks = st.one_of(
    st.none(),
    st.none(),
    st.integers(min_value=0, max_value=10**7).map(str),
    st.integers(min_value=0, max_value=999).map(lambda n: f"0{n}"),  # leading zeros
    st.text(max_size=12),
    st.sampled_from(["../../x", "1/..", "state", " 7", "7 ", "+7", "-7", "٣", "1_2", "0x7"]),
)
printable = st.text(alphabet=st.characters(exclude_categories=("Cc", "Cs", "Cf", "Zl", "Zp")),
                    min_size=1, max_size=40)
reasons = st.one_of(
    printable,
    printable,
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
    st.sampled_from(["", " ", "\t", "ok\nforged", "ok\r", "\x1b[31mred", "a\u2028b", "\u202e"]),
)


def new_job(store: RecordStore, seg: Path) -> str:
    spec = parse_spec({"name": "fz", "backend": "slurm", "command": ["train"],
                       "segment_health": {"dir": str(seg)}})
    job_id = create_job(store, spec, declarations_for("slurm"), NOW)
    store.append(job_id, [ev.SubmissionIntended(seq=2, at=NOW, submission=1, token=f"{job_id}.1"),
                          ev.SubmissionBound(seq=3, at=NOW, submission=1, ref="1080")], 1)
    return job_id


def unit_files(seg: Path) -> set[str]:
    return {n for n in os.listdir(seg) if not n.startswith(".")} if seg.exists() else set()


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(task=tasks, reason=reasons, clear_reason=reasons)
def test_mark_and_clear_are_done_or_refused_cleanly(tmp_path: Path, task: str | None,
                                                    reason: str, clear_reason: str) -> None:
    seg = tmp_path / "seg"
    with open_store(f"sqlite://{tmp_path / 'r.sqlite3'}") as store:
        job_id = new_job(store, seg)
        files_before = unit_files(seg)
        events_before = len(store.read(job_id))
        try:
            path = mark(store, job_id, task, reason, "fuzz", NOW)
        except BadInput as refused:
            event("mark refused")
            assert str(refused)  # a message a person can act on
            assert len(store.read(job_id)) == events_before  # nothing recorded
            assert unit_files(seg) == files_before  # nothing written
            return
        event("mark done")
        name = os.path.basename(path)
        job = fold(store.read(job_id), NOW)
        [recorded] = [d for d in job.segments if d.task_id == name.rsplit(".", 1)[1]]
        assert recorded.reason == reason and "\n" not in reason
        assert os.stat(path).st_size > 0 and name in unit_files(seg)
        count = len(store.read(job_id))
        try:
            removed = unmark(store, job_id, task, clear_reason, "fuzz", NOW)
        except BadInput:
            event("clear refused")
            assert len(store.read(job_id)) == count and os.path.exists(path)
            return
        event("clear done")
        assert removed and not os.path.exists(path)
        assert type(store.read(job_id)[-1]).__name__ == "SegmentCleared"

