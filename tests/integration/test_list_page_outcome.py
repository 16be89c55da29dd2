"""The API's job pages filter a finished state in the store (issue 27): the page is the
store's keyset page of jobs with that outcome, and only its own records are read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from dispatch.core.events import JobCreated, OutcomeCommitted
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.service import Service
from dispatch.service.listing import ListRequest, decode_cursor, list_page
from dispatch.stores.sqlite import SQLiteStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_finished_state_is_a_store_filter_and_pages(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "r.sqlite3")
    store.create_many([JobCreated(seq=1, at=T0 + timedelta(hours=i), job_id=f"j{i}",
                                  spec=JobSpec(name="n", command=("true",), backend="local"),
                                  declarations=Declarations(backend="local"))
                       for i in range(6)])
    for i in (0, 2, 3, 5):
        store.append(f"j{i}", [OutcomeCommitted(
            seq=2, at=T0, state=State.SUCCEEDED if i != 3 else State.FAILED,
            cause=Cause(kind=CauseKind.NONE))], 1)
    service = Service(store)
    req = ListRequest(state=State.SUCCEEDED, limit=2)
    assert not req.derived  # the store filters it: no fold of every job
    page = list_page(service, req)
    assert [d["job"] for d in page["jobs"]] == ["j5", "j2"]
    after = decode_cursor(page["next"], "created", True)
    rest = list_page(service, ListRequest(state=State.SUCCEEDED, limit=2, after=after))
    assert [d["job"] for d in rest["jobs"]] == ["j0"] and rest["next"] is None
    failed = list_page(service, ListRequest(state=State.FAILED))
    assert [d["job"] for d in failed["jobs"]] == ["j3"]
    service.close()
