"""S13: every model type and every record event round-trips through the strict codec, and
an unknown name anywhere is refused with a DecodeError naming the field and the word."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tests.strategies_core import EVENT_STRATEGIES, MODEL_STRATEGIES, any_event

from dispatch.core import events as ev
from dispatch.core import model, policy, spec
from dispatch.core.codec import DecodeError, decode, decode_event, encode, encode_event, to_builtins
from dispatch.core.deferred import Deferred
from dispatch.core.status import plain

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

MODEL_TYPES: dict[str, type[Any]] = {
    name: getattr(model, name, None) or getattr(policy, name, None) or getattr(spec, name)
    for name in MODEL_STRATEGIES
}


def test_every_event_type_has_a_strategy() -> None:
    assert set(EVENT_STRATEGIES) == set(ev.EVENT_TYPES)


def test_every_model_type_has_a_strategy() -> None:
    wanted = {"Cause", "Execution", "ObjectReport", "Discovery", "Transition", "Escalation",
              "Status", "Rule", "RecoveryPolicy", "Declarations", "JobSpec"}
    assert wanted <= set(MODEL_STRATEGIES)


@pytest.mark.parametrize("event_type", ev.EVENT_TYPES, ids=lambda t: t.__name__)
@SETTINGS
@given(data=st.data())
def test_every_event_round_trips(event_type: type[Any], data: st.DataObject) -> None:
    event = data.draw(EVENT_STRATEGIES[event_type])
    raw = encode_event(event)
    assert json.loads(raw)["type"] == event_type.__struct_config__.tag
    assert decode_event(raw) == event
    assert decode_event(raw, job_id="j", seq=event.seq) == event
    assert type(decode_event(raw)) is event_type


@pytest.mark.parametrize("name", sorted(MODEL_STRATEGIES))
@SETTINGS
@given(data=st.data())
def test_every_model_type_round_trips(name: str, data: st.DataObject) -> None:
    typ = MODEL_TYPES[name]
    value = data.draw(MODEL_STRATEGIES[name])
    decoded = decode(encode(value), typ)
    if isinstance(decoded, model.Status):  # Sequence fields decode as lists
        decoded = msgspec.structs.replace(decoded, history=tuple(decoded.history),
                                          escalations=tuple(decoded.escalations))
    assert decoded == value
    # to_builtins gives the same document the encoder writes
    assert json.loads(encode(value)) == json.loads(json.dumps(to_builtins(value)))


@SETTINGS
@given(data=st.data())
def test_a_status_read_through_a_snapshot_encodes_as_the_folded_one(data: st.DataObject
                                                                    ) -> None:
    """Its history and escalations may be Deferred (core/deferred.py): the codec writes them
    as the tuples they stand for, and status.plain() gives a Status holding those tuples."""
    value = data.draw(MODEL_STRATEGIES["Status"])
    history = tuple(value.history)
    lazy = msgspec.structs.replace(
        value, history=Deferred(encode(history), len(history), _transitions, "j"))
    assert encode(lazy) == encode(value)
    assert to_builtins(lazy) == to_builtins(value)
    assert plain(lazy) == value and type(plain(lazy).history) is tuple


def _transitions(raw: bytes, count: int, owner: str) -> tuple[model.Transition, ...]:
    return decode(raw, tuple[model.Transition, ...])


# --- unknown names -------------------------------------------------------------------------

WORD = "from-a-newer-build"


def _paths(doc: Any, path: str = "$") -> list[tuple[str, Any]]:
    out = [(path, doc)]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, f"{path}[{i}]")
    return out


def _replace(doc: Any, path: str, value: Any, here: str = "$") -> Any:
    if here == path:
        return value
    if isinstance(doc, dict):
        return {k: _replace(v, path, value, f"{here}.{k}") for k, v in doc.items()}
    if isinstance(doc, list):
        return [_replace(v, path, value, f"{here}[{i}]") for i, v in enumerate(doc)]
    return doc


ENUM_FIELDS = {
    # field name in a document -> the enum its value names
    "type": None,  # the event's tag
    "kind": model.CauseKind,
    "provenance": model.Provenance,
    "state": model.State,
    "action": policy.Action,
    "enforcer": policy.Enforcer,
    "level": model.Level,
}


def _enum_places(doc: Any) -> list[str]:
    """Every place in an encoded document whose value is an enum name."""
    places = []
    for path, value in _paths(doc):
        last = path.rsplit(".", 1)[-1]
        if last in ENUM_FIELDS and isinstance(value, str):
            places.append(path)
        elif "[" in last and last.split("[")[0] in ("on", "native_actions") and isinstance(
                value, str):
            places.append(path)
    return places


@SETTINGS
@given(event=any_event, data=st.data())
def test_an_unknown_name_anywhere_in_an_event_is_refused(event: Any, data: st.DataObject
                                                         ) -> None:
    doc = json.loads(encode_event(event))
    places = _enum_places(doc)
    assert "$.type" in places
    place = data.draw(st.sampled_from(places))
    bad = json.dumps(_replace(doc, place, WORD)).encode()
    with pytest.raises(DecodeError) as err:
        decode_event(bad, job_id="j7", seq=event.seq)
    assert err.value.field == place
    assert WORD in str(err.value)
    assert err.value.job_id == "j7" and err.value.seq == event.seq


@pytest.mark.parametrize("name", ["Cause", "ObjectReport", "Status", "RecoveryPolicy",
                                  "Declarations", "Transition"])
@SETTINGS
@given(data=st.data())
def test_an_unknown_name_in_a_model_document_is_refused(name: str, data: st.DataObject
                                                        ) -> None:
    doc = json.loads(encode(data.draw(MODEL_STRATEGIES[name])))
    places = [p for p in _enum_places(doc) if p != "$.type"]
    assume(places)  # e.g. an empty policy has no name to corrupt
    place = data.draw(st.sampled_from(places))
    with pytest.raises(DecodeError) as err:
        decode(json.dumps(_replace(doc, place, WORD)).encode(), MODEL_TYPES[name])
    assert err.value.field == place
    assert WORD in str(err.value)
