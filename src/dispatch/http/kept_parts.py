"""The /metrics parts a collector keeps in the store, and takes back when it starts cold
(issue 49; the cache itself: stores/part_cache.py, its bodies: http/part_codec.py).

A cold collector's first scrape used to read, fold, project and compute goodput for every
record (about 65 µs a job: 6 s at 100,000 jobs). A job's part depends only on its committed
events, so the collector writes each part it computed (in a thread of its own, after the
scrape has folded it into the totals: ``PartWriter``), and a collector that starts later
takes every cached part whose version is the job's current one (the store checks that, the
format and the edit mark in the read) and reads only the other records. A part that does
not decode is ignored: its job is read, and its part written again. Writing is a cache's:
its own transaction, after the fact, a failure logged and nothing else.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from dispatch.core.record import Job
from dispatch.http import part_codec
from dispatch.http.fleet_tally import Part
from dispatch.service import Service
from dispatch.stores.base import RecordStore, StoreError
from dispatch.stores.part_cache import Written, read_parts, write_parts

log = logging.getLogger(__name__)


def cached_parts(store: RecordStore, rows: dict[str, tuple[int, bool]]
                 ) -> dict[str, tuple[int, Part]]:
    """The cached parts of the jobs in ``rows`` (job -> (version, finished), as the
    collector listed them) at exactly the version listed: job -> (version, part)."""
    try:
        stored = read_parts(store, part_codec.FORMAT)
    except StoreError as err:  # a cache: the records are read instead
        log.warning("the cached /metrics parts could not be read: %s", err)
        return {}
    out: dict[str, tuple[int, Part]] = {}
    if not stored:
        return out
    ignored = 0
    decode = part_codec.decode
    for job_id, version, body in stored:
        row = rows.get(job_id)
        if row is None or row[0] != version:
            continue  # written to or gone since the list: read as without a cache
        part = decode(job_id, version, body)
        if part is None:
            ignored += 1
            continue
        out[job_id] = (version, part)
    if ignored:
        log.warning("%d cached /metrics parts could not be decoded; their records are "
                    "read and the parts written again", ignored)
    return out


class PartWriter:
    """Writes the parts a scrape computed into the store's cache in a thread of its own,
    off the scrape's path: a scrape after 1,000 jobs changed would otherwise spend about
    20 ms of its CPU writing them (SQLite, 101,000 jobs, bench/RESULTS.md). The thread is
    started when there is something to write and ends when nothing is left; a failure is
    logged (the next cold collector reads those records)."""

    def __init__(self, open_service: Callable[[], Service]) -> None:
        self.open_service = open_service
        self._cond = threading.Condition()
        self._pending: list[tuple[str, int, Part]] = []
        self._running = False

    def put(self, computed: Sequence[tuple[Job, Part]]) -> None:
        """Write these parts, each at the version of the record it was folded from."""
        if not computed:
            return
        with self._cond:
            self._pending.extend((job.id, job.version, part) for job, part in computed)
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="metrics-parts", daemon=True).start()

    def flush(self) -> None:
        """Wait until every part put so far was written (or its write failed)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._running)

    def _run(self) -> None:
        while True:
            with self._cond:
                todo, self._pending = self._pending, []
                if not todo:
                    self._running = False
                    self._cond.notify_all()
                    return
            try:
                with self.open_service() as service:
                    keep_parts(service.store, todo)
            except Exception as err:  # noqa: BLE001 - a cache: never anyone's failure
                log.warning("%d /metrics parts were not cached: %s", len(todo), err)


def keep_parts(store: RecordStore, computed: Sequence[tuple[str, int, Part]]) -> None:
    """Write ``(job, version, part)``s; a failure is logged."""
    parts: list[Written] = []
    for job_id, version, part in computed:
        body = part_codec.encode(job_id, version, part)
        if body is not None:
            parts.append((job_id, version, body))
    try:
        write_parts(store, part_codec.FORMAT, parts)
    except StoreError as err:
        log.warning("%d /metrics parts were not cached: %s", len(parts), err)


__all__ = ["PartWriter", "cached_parts", "keep_parts"]
