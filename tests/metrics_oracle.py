"""The oracle for /metrics' kept totals (issue 36): every record read and counted anew, and
a store's life driven step by step with the kept totals compared to it after each step.
Used by tests/unit/http/test_metrics_totals.py (hypothesis) and tests/integration/stores/
test_store_metrics_totals.py (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import msgspec
from hypothesis import strategies as st
from prometheus_client.core import Metric
from tests.goodput_stories import preempted_once
from tests.strategies import records

from dispatch.core import events as ev
from dispatch.core.goodput import ZERO
from dispatch.core.model import CauseKind, State
from dispatch.http import part_codec
from dispatch.http.goodput_metrics import goodput_families
from dispatch.http.metrics import RecordCollector, record_families, stored_family
from dispatch.service import Service
from dispatch.service.goodput import job_times
from dispatch.stores import part_cache
from dispatch.stores.query import JobQuery
from dispatch.stores.select import open_store
from dispatch.stores.sqlite import SQLiteStore

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(families: Iterator[Metric] | list[Metric]) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def from_scratch(service: Service) -> Samples:
    """Every record read and counted anew, as /metrics did before it kept totals (its
    states as the record says: no scheduler asked)."""
    ids = [r.job_id for r in service.store.list_jobs()]
    views = service.views(ids, ask_scheduler=False)
    out: Samples = {}
    states = Counter(v.status.state.value for v in views if v.status is not None)
    for state in State:
        out[("dispatch_jobs", (("state", state.value),))] = states.get(state.value, 0)
    out[("dispatch_jobs_record_unusable", ())] = sum(1 for v in views if v.status is None)
    outcomes: Counter[tuple[str, str]] = Counter()
    recoveries: Counter[str] = Counter()
    escalations: Counter[str] = Counter()
    app_errors: Counter[str] = Counter()
    budget: dict[tuple[str, str], int] = {}
    for v in views:
        s = v.status
        if s is None:
            continue
        for t in s.history:
            if t.state is State.RECOVERING and t.cause is not None:
                recoveries[t.cause.kind.value] += 1
            elif t.state.terminal and t.cause is not None:
                outcomes[(t.state.value, t.cause.kind.value)] += 1
        for x in s.escalations:
            escalations[x.cause.kind.value if x.cause is not None else "none"] += 1
        if s.settled and s.error is not None and s.cause is not None:
            app_errors[s.cause.kind.value] += 1
        if not s.state.terminal:
            for rule, n in s.budget_used.items():
                key = (s.scope or s.backend, rule)
                budget[key] = budget.get(key, 0) + n
    for (state, cause), n in outcomes.items():
        out[("dispatch_outcomes_total", (("cause", cause), ("state", state)))] = n
    for kind in CauseKind:
        if recoveries.get(kind.value):
            out[("dispatch_recoveries_total", (("cause", kind.value),))] = recoveries[kind.value]
    for cause, n in escalations.items():
        out[("dispatch_escalations_total", (("cause", cause),))] = n
    for cause, n in app_errors.items():
        out[("dispatch_application_errors_total", (("cause", cause),))] = n
    for (scope, rule), n in budget.items():
        out[("dispatch_budget_used", (("rule", rule), ("scope", scope)))] = n
    times, _ = job_times(service.store, ids, service.clock())
    phases: dict[tuple[str, str, str], timedelta] = {}
    lost: dict[tuple[str, str], timedelta] = {}
    for jt in times:
        for x in jt.segments[: jt.closed]:
            key = (x.phase.value, x.cause.value, jt.backend)
            phases[key] = phases.get(key, ZERO) + (x.end - x.start) * x.nodes
        for x in jt.lost:
            lkey = (x.cause.value, jt.backend)
            lost[lkey] = lost.get(lkey, ZERO) + (x.end - x.start) * x.nodes
    for (phase, cause, backend), d in phases.items():
        out[
            (
                "dispatch_job_seconds_total",
                (("backend", backend), ("cause", cause), ("phase", phase)),
            )
        ] = d.total_seconds()
    for (cause, backend), d in lost.items():
        out[("dispatch_lost_work_seconds_total", (("backend", backend), ("cause", cause)))] = (
            d.total_seconds()
        )
    # the store's own columns, counted anew
    out.update(_samples([stored_family(service.store.count_jobs(JobQuery()))]))
    return out


def kept(collector: RecordCollector, service: Service) -> Samples:
    """The kept totals' families, and ``dispatch_jobs_stored`` from the counts their refresh
    took (issue 49: one count per scrape, also what catches a prune)."""
    totals = collector.totals(service)
    collector.parts_writer.flush()  # and what it computed is in the cache, for what follows
    return _samples([*record_families(totals, {}), *goodput_families(totals),
                     stored_family(collector._versions.counts)])


def story(job_id: str, nodes: int, backend: str) -> list[Any]:
    return list(preempted_once(nodes, job_id=job_id, backend=backend).record)


class Life:
    """A store whose jobs are created, advanced along their records, and pruned, with
    /metrics' kept totals compared to a whole recomputation after every step."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.collector = RecordCollector(self.opened)
        self.full: dict[str, list[Any]] = {}  # job -> the record it will have in the end
        self.written: dict[str, int] = {}  # job -> events written so far
        self.pruned = 0
        self.unusable = 0

    def new(self, record: list[Any]) -> None:
        created = record[0]
        assert isinstance(created, ev.JobCreated)
        self.service.store.create(created)
        self.full[created.job_id], self.written[created.job_id] = record, 1

    def advance(self, job_id: str, n: int) -> None:
        more = self.full[job_id][self.written[job_id] : self.written[job_id] + n]
        if more:
            self.service.store.append(job_id, more, self.written[job_id])
            self.written[job_id] += len(more)

    def prune(self) -> None:
        for gone in self.service.store.prune(2**62, act=True):
            self.full.pop(gone, None)
            self.written.pop(gone, None)
            self.pruned += 1

    def check(self, what: str) -> None:
        want = from_scratch(self.service)
        assert kept(self.collector, self.service) == want, f"after {what}"
        self.unusable = max(self.unusable, int(want[("dispatch_jobs_record_unusable", ())]))

    def restart(self) -> None:
        """A new collector, as a restarted serve's: its first scrape takes the parts the
        store keeps (stores/part_cache.py) and reads only the other records. The collector
        before it has written what it computed (its writer's thread is waited for)."""
        self.collector.parts_writer.flush()
        self.collector = RecordCollector(self.opened)

    def opened(self) -> Service:
        """The life's service, for a collector that opens one (its scrapes, its writer)
        and closes it after: left open here."""
        return cast(Service, nullcontext(self.service))

    def damage(self, how: str, pick: int) -> None:
        """Spoil the cached part of the ``pick``-th job that has one, as a hand, a torn
        write or another build could (``how``: DAMAGES), or drop every part."""
        self.collector.parts_writer.flush()  # what it computed is in the cache
        store = self.service.store
        rows = sorted(cache_sql(store, "SELECT job_id, body FROM metric_parts",
                                "SELECT job_id, body FROM dispatch_metric_parts"))
        if how == "drop":
            part_cache.drop_all(store)
        if how == "drop" or not rows:
            return
        job_id, body = rows[pick % len(rows)]
        other = rows[(pick + 1) % len(rows)][1]
        raw = body if isinstance(body, bytes) else str(body).encode()
        new = {"garbage": b"not a part", "torn": raw[: len(raw) // 2], "other": other,
               "renamed": raw.replace(job_id.encode(), b"x" + job_id.encode(), 1)}.get(how)
        if new is not None:
            new_s: object = new if isinstance(store, SQLiteStore) else (
                new.decode() if isinstance(new, bytes) else new)
            cache_sql(store, "UPDATE metric_parts SET body = ? WHERE job_id = ?",
                      "UPDATE dispatch_metric_parts SET body = %s WHERE job_id = %s",
                      (new_s, job_id))
        elif how == "format":
            cache_sql(store, "UPDATE metric_parts SET format = format + 1 WHERE job_id = ?",
                      "UPDATE dispatch_metric_parts SET format = format + 1 WHERE job_id = %s",
                      (job_id,))
        elif how == "older":  # the body of a part the job has moved past, in a current row
            cache_sql(store, "UPDATE metric_parts SET body = ? WHERE job_id = ?",
                      "UPDATE dispatch_metric_parts SET body = %s WHERE job_id = %s",
                      (_older(store, job_id, raw), job_id))

    def edit(self, job_id: str) -> None:
        """Swap the bodies of the job's first two events in place (by hand, under every
        reader): the trigger marks the job edited, and its record no longer reads."""
        store = self.service.store
        pg = not isinstance(store, SQLiteStore)
        bodies = cache_sql(
            store, "SELECT seq, body FROM events WHERE job_id = ? AND seq <= 2 ORDER BY seq",
            "SELECT seq, body FROM dispatch_events WHERE job_id = %s AND seq <= 2"
            " ORDER BY seq", (job_id,))
        if len(bodies) < 2:
            return
        for seq, body in ((1, bodies[1][1]), (2, bodies[0][1])):
            cache_sql(store, "UPDATE events SET body = ? WHERE job_id = ? AND seq = ?",
                      "UPDATE dispatch_events SET body = %s WHERE job_id = %s AND seq = %s",
                      (str(body) if pg else body, job_id, seq))


DAMAGES = ("garbage", "torn", "other", "renamed", "format", "older", "drop")


def _older(store: Any, job_id: str, raw: bytes) -> object:
    """The body of the job's part as it was one version back (the row's version column is
    left at the current one, as a hand that edited it would leave it)."""
    from dispatch.core.record import fold
    from dispatch.http.fleet_tally import part_of
    from dispatch.stores.reading import RECORD_ERRORS

    now = datetime.now(UTC)
    try:
        events = store.read(job_id)
        part = part_of(fold(events[:-1], now, job_id=job_id), events[:-1], now)
    except (*RECORD_ERRORS, IndexError):  # a record that cannot be read: left as it is
        return raw if isinstance(store, SQLiteStore) else raw.decode()
    body = part_codec.encode(job_id, len(events) - 1, part) or raw
    return body if isinstance(store, SQLiteStore) else body.decode()


def cache_sql(store: Any, sqlite_sql: str, pg_sql: str, params: tuple[Any, ...] = ()
              ) -> list[Any]:
    """Raw SQL on the store's own connection (what dispatch never does to a cache)."""
    if isinstance(store, SQLiteStore):
        with store._guard("test") as conn:
            return conn.execute(sqlite_sql, params).fetchall()
    return list(store._query("test", pg_sql + ("" if pg_sql.startswith("SELECT")
                                               else " RETURNING 1"), params))


# A step of a store's life: a job created (a story, or a drawn record), advanced, a prune,
# a restart of the collector, a cached part spoilt, a record edited in place.
LIFE_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("story"), st.integers(1, 64), st.sampled_from(["local", "slurm"])),
        st.tuples(st.just("drawn"), st.integers(0, 10**6)),
        st.tuples(st.just("advance"), st.integers(0, 50), st.integers(1, 12)),
        st.tuples(st.just("prune")),
        st.tuples(st.just("restart")),
        st.tuples(st.just("damage"), st.sampled_from(DAMAGES), st.integers(0, 50)),
        st.tuples(st.just("edit"), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=30,
)


def run_life(life: Life, steps: Sequence[tuple[Any, ...]], data: st.DataObject,
             prefix: str = "j") -> None:
    """``LIFE_STEPS`` through ``life``, its jobs named ``prefix`` and the step's number,
    checked after every step. Every collector a restart starts is a cold one: its first
    scrape takes what the cache holds, spoilt or not."""
    for n, step in enumerate(steps):
        if step[0] == "story":
            life.new(story(f"{prefix}{n}", step[1], step[2]))
        elif step[0] == "drawn":
            drawn = data.draw(records(job_id=f"{prefix}{n}", max_events=12))
            # no supersede chains: the store refuses one to a job it does not hold
            life.new([msgspec.structs.replace(drawn[0], supersedes=None), *drawn[1:]])
        elif step[0] == "advance" and life.full:
            life.advance(sorted(life.full)[step[1] % len(life.full)], step[2])
        elif step[0] == "prune":
            life.prune()
        elif step[0] == "restart":
            life.restart()
        elif step[0] == "damage":
            life.damage(step[1], step[2])
            life.restart()
        elif step[0] == "edit" and life.full:
            life.edit(sorted(life.full)[step[1] % len(life.full)])
            # a collector already running keeps the part it read (the edit kept the
            # version); one started after it must not take it from the cache
            life.restart()
        life.check(f"step {n}: {step}")


STORED = "dispatch_jobs_stored"
READY = "dispatch_record_totals_ready"


def first_and_built(url: str, *, guard_s: float = 120.0) -> tuple[Samples, Samples]:
    """(a scrape taken while the totals' background build runs, as serve's first scrape
    after start; the scrape after the build). The build is held until the first scrape has
    answered, so that scrape always meets it running; ``guard_s`` only keeps a scrape that
    waits for the build (the behaviour before issue 49) from hanging the test."""
    go = threading.Event()

    def opened() -> Service:
        if threading.current_thread().name == "metrics-totals":
            go.wait()  # the build: held until the first scrape is in
        return Service(open_store(url))

    collector = RecordCollector(opened)
    build = collector.warm()
    first: list[Samples] = []
    scrape = threading.Thread(target=lambda: first.append(_samples(list(collector.collect()))),
                              daemon=True)
    scrape.start()
    scrape.join(guard_s)
    go.set()
    build.join()
    scrape.join()
    assert first, "the first scrape did not answer while the totals were being built"
    return first[0], _samples(list(collector.collect()))


def check_first_scrape(url: str) -> Samples:
    """The scrape before the totals are built holds only what the store counts, each sample
    equal to the same one once they are built; the built scrape's counts by state agree with
    the store's (a job whose record cannot be used is counted by its column there)."""
    first, built = first_and_built(url)
    assert first[(READY, ())] == 0 and built[(READY, ())] == 1
    assert {k: v for k, v in first.items() if k[0] != READY} == {
        k: v for k, v in built.items() if k[0] == STORED}
    stored = {dict(k[1])["state"]: v for k, v in built.items() if k[0] == STORED}
    states = {dict(k[1])["state"]: v for k, v in built.items() if k[0] == "dispatch_jobs"}
    with open_store(url) as store:
        rows = store.list_jobs()
    assert stored["unfinished"] == sum(1 for r in rows if not r.terminal)
    assert sum(stored.values()) == len(rows)
    unusable = built[("dispatch_jobs_record_unusable", ())]
    for state in State:
        if state.terminal:  # a finished job is counted by its outcome, unless unusable
            assert states[state.value] <= stored[state.value] <= states[state.value] + unusable
    live = sum(n for s, n in states.items() if not State(s).terminal)
    assert live <= stored["unfinished"] <= live + unusable
    return built
