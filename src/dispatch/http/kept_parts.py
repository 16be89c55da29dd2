"""The /metrics parts a collector keeps in the store, and takes back when it starts cold
(issue 49; the cache itself: stores/part_cache.py, its bodies: http/part_codec.py).

A cold collector's first scrape used to read, fold, project and compute goodput for every
record (about 65 µs a job: 6 s at 100,000 jobs). A job's part depends only on its committed
events, so the collector writes each part it computed, after the scrape has folded it into
the totals, and a collector that starts later takes every cached part whose version is the
job's current one (the store checks that, the format and the edit mark in the read) and
reads only the other records. A part that does not decode is ignored: its job is read, and
its part written again. Writing is a cache's: its own transaction, after the fact, a
failure logged and nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from dispatch.core.record import Job
from dispatch.http import part_codec
from dispatch.http.fleet_tally import Part
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
    for job_id, (version, body) in stored.items():
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


def keep_parts(store: RecordStore, computed: Sequence[tuple[Job, Part]]) -> None:
    """Write the parts just computed, each at the version of the record it was folded
    from; a failure is logged (the next cold collector reads those records)."""
    parts: list[Written] = []
    for job, part in computed:
        body = part_codec.encode(job.id, job.version, part)
        if body is not None:
            parts.append((job.id, job.version, body))
    try:
        write_parts(store, part_codec.FORMAT, parts)
    except StoreError as err:
        log.warning("%d /metrics parts were not cached: %s", len(parts), err)


__all__ = ["cached_parts", "keep_parts"]
