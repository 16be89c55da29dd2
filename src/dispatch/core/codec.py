"""Strict, name-based encoding (S13).

Every enum encodes as its name (``"node-lost"``), every event as a JSON object tagged with
its ``type``. Decoding refuses an unknown name, an unknown field or a wrong type with a
DecodeError naming the field and the word; a record from a newer build is refused, never
misread.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from dispatch.core.deferred import Deferred
from dispatch.core.events import Event
from dispatch.core.model import Cause
from dispatch.errors import StoreUnusable

T = TypeVar("T")


class DecodeError(StoreUnusable, ValueError):
    """A stored or received document that cannot be decoded, with where and why."""

    def __init__(self, message: str, *, field: str = "", job_id: str | None = None,
                 seq: int | None = None) -> None:
        self.field = field
        self.job_id = job_id
        self.seq = seq
        self.reason = message
        where = []
        if job_id is not None:
            where.append(f"job {job_id}")
        if seq is not None:
            where.append(f"seq {seq}")
        if field:
            where.append(f"field {field}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


_AT = re.compile(r" - at `(\$[^`]*)`$")

def _enc_hook(value: Any) -> Any:
    # A job read through a snapshot carries its past as Deferred sequences: written as
    # the tuples they stand for.
    if isinstance(value, Deferred):
        return value.items()
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)
_event_decoder = msgspec.json.Decoder(Event)
# For bulk readers that check what decode_event checks themselves and, on any failure, call
# decode_event for its error (stores/bulk_decode.py): one decoder, so the same events.
EVENT_DECODER = _event_decoder


def _wrap(err: msgspec.DecodeError, job_id: str | None, seq: int | None) -> DecodeError:
    text = str(err)
    m = _AT.search(text)
    field = m.group(1) if m else ""
    message = text[: m.start()] if m else text
    return DecodeError(message, field=field, job_id=job_id, seq=seq)


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


def decode(data: bytes | str, typ: type[T]) -> T:
    try:
        return msgspec.json.decode(data, type=typ, strict=True)
    except msgspec.DecodeError as err:
        raise _wrap(err, None, None) from None


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def decode_event(data: bytes | str, *, job_id: str | None = None,
                 seq: int | None = None) -> Event:
    try:
        event: Event = _event_decoder.decode(data)
    except msgspec.DecodeError as err:
        raise _wrap(err, job_id, seq) from None
    if seq is not None and event.seq != seq:
        raise DecodeError(f"stored at seq {seq} but says seq {event.seq}", field="$.seq",
                          job_id=job_id, seq=seq)
    return event


def to_builtins(value: Any) -> Any:
    """Plain JSON-ready data (enums as names, times as RFC 3339)."""
    return msgspec.to_builtins(value, enc_hook=_enc_hook)


def cause_json(c: Cause | None) -> dict[str, Any] | None:
    """A cause with every key present (what `status --json` and escalations promise)."""
    if c is None:
        return None
    return {"kind": c.kind.value, "provenance": c.provenance.value, "actor": c.actor,
            "detail": c.detail, "note": c.note, "exit_code": c.exit_code,
            "at": c.at.isoformat() if c.at else None}
