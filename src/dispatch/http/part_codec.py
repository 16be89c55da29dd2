"""A job's /metrics part (http/fleet_tally.py ``Part``) as the store caches it
(stores/part_cache.py, issue 49): msgspec JSON, an array of the job's id, the version it
was computed at and the part (an array of its fields in order), decoded strictly. A body
this build cannot decode into exactly those types, one that names another job or version
than its row (a row copied or edited by hand), or whose state is not a state, is no part:
the job is read and folded instead, and its part written again.
"""

from __future__ import annotations

import msgspec

from dispatch.core.model import State
from dispatch.http.fleet_tally import Part

FORMAT = 1
"""The encoding of a cached part: a change to ``Part``'s fields, or to what ``part_of``
computes from the same events, bumps it; cached parts of another format are ignored (and
written again as their jobs are read)."""


class _Body(msgspec.Struct, array_like=True, forbid_unknown_fields=True, gc=False):
    """The job, the version its part was computed at, and the part (an array of
    ``Part``'s fields in its order, every one required: ``forbid_unknown_fields``)."""

    job_id: str
    version: int
    part: Part


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(_Body, strict=True)
_STATES = frozenset(s.value for s in State)


def encode(job_id: str, version: int, p: Part) -> bytes | None:
    """The body of a usable part of ``job_id`` at ``version``; None for the unusable one
    (never cached: such a record is read again at every scrape)."""
    if p.state is None:
        return None
    return _ENCODER.encode(_Body(job_id, version, p))


def decode(job_id: object, version: object, body: bytes | str) -> Part | None:
    """The part ``body`` holds for ``job_id`` at ``version``, or None when it is not one
    this build wrote for them."""
    try:
        b = _DECODER.decode(body)
    except (msgspec.DecodeError, ValueError, TypeError):
        return None
    if b.job_id != job_id or b.version != version or b.part.state not in _STATES:
        return None
    return b.part


__all__ = ["FORMAT", "decode", "encode"]
