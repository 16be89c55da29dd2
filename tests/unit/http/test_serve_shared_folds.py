"""Issue 49: `dispatch serve` supervising in-process folds each live job once. Its
supervisors are built sharing the held index's folded jobs (stores/live.py SharedFolds), so
a supervisor's first look takes the index's jobs, unread: the very objects, equal to the
whole fold (tests/integration/stores/test_shared_folds.py checks the answers under random
writes on both stores)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dispatch.core import events as ev
from dispatch.core.policy import Declarations
from dispatch.core.record import fold
from dispatch.core.spec import JobSpec
from dispatch.http import app as app_module
from dispatch.http import server as server_module
from dispatch.http.auth import Tokens
from dispatch.stores.sqlite import SQLiteStore
from dispatch.supervise.loop import Supervisor

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Recorded:
    """Supervision as the server builds it, recorded; its run returns at once."""

    made: list[Any] = []

    def __init__(self, *args: Any, make_supervisor: Any, **kwargs: Any) -> None:
        Recorded.made.append(make_supervisor)
        self.on_change = None

    def stop(self) -> None:
        pass

    def run(self, on_tick: Any) -> None:
        pass


def test_serve_supervisors_take_the_held_index_jobs(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.sqlite3"
    with SQLiteStore(path) as store:
        store.create_many([ev.JobCreated(
            seq=1, at=T0 + timedelta(seconds=i), job_id=f"j{i}",
            spec=JobSpec(name=f"n{i}", command=("true",), backend="local"),
            declarations=Declarations(backend="local")) for i in range(3)])
    monkeypatch.setattr(server_module, "Supervision", Recorded)
    Recorded.made = []
    server = app_module.make_server(f"sqlite://{path}", Tokens({}), loopback_bind=False)
    loop = server_module.SupervisorLoop(server, ["local"], poll=1.0)
    loop.stopping.set()  # its scope watcher ends at once
    loop._run()  # noqa: SLF001 - the thread's body, here, with Supervision recorded
    assert len(Recorded.made) == 1
    with server.service() as service:
        index_jobs = server.held_index.live(service.store, T0)
        sup = Recorded.made[0](service.store, service.backends, name="test", scope=None)
        assert isinstance(sup, Supervisor)
        asked: list[dict[str, int]] = []
        read_after = service.store.read_after
        monkeypatch.setattr(service.store, "read_after",
                            lambda versions: asked.append(versions) or read_after(versions))
        jobs, errors = sup.live.refresh(T0)
        assert errors == {} and asked == []  # nothing read: every job taken from the index
        assert all(a is b for a, b in zip(jobs, index_jobs, strict=True))
        assert jobs == [fold(service.store.read(j.id), T0) for j in jobs]
