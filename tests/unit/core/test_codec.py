"""The strict codec (S13): names, not ints; refusals that say where and what."""

from __future__ import annotations

import json

import pytest
from tests.strategies_core import T0

from dispatch.core import events as ev
from dispatch.core.codec import DecodeError, decode, decode_event, encode, encode_event, to_builtins
from dispatch.core.model import Cause, CauseKind, ObjectReport, Provenance, State
from dispatch.core.policy import Action, Declarations, RecoveryPolicy, Rule

K = CauseKind


@pytest.mark.parametrize("kind, name", [
    (K.NODE_LOST, "node-lost"), (K.OUT_OF_MEMORY, "out-of-memory"),
    (K.NON_ZERO_EXIT, "non-zero-exit"), (K.TIME_LIMIT, "time-limit"),
    (K.LAUNCH_FAILED, "launch-failed"), (K.NO_CAPACITY, "no-capacity"),
])
def test_cause_kinds_encode_in_the_seeds_spelling(kind: CauseKind, name: str) -> None:
    """Issue 2 item 3: `"node-lost"`, `"out-of-memory"`, `"non-zero-exit"` — the seed's
    spelling, not NODE_LOST or an int."""
    doc = json.loads(encode(Cause(kind=kind, provenance=Provenance.APPLICATION, exit_code=3)))
    assert doc == {"kind": name, "provenance": "application", "exit_code": 3}


def test_an_event_is_a_tagged_document_with_names() -> None:
    e = ev.OutcomeCommitted(seq=9, at=T0, state=State.FAILED,
                            cause=Cause(kind=K.NODE_LOST, detail="NODE_FAIL"))
    assert json.loads(encode_event(e)) == {
        "type": "outcome-committed", "seq": 9, "at": "2026-01-01T00:00:00Z",
        "state": "failed", "cause": {"kind": "node-lost", "detail": "NODE_FAIL"}}
    rec = ev.RecoveryStarted(seq=3, at=T0, rule=0, action=Action.REQUEUE,
                             cause=Cause(kind=K.PREEMPTED), native=True)
    assert json.loads(encode_event(rec))["action"] == "requeue"
    assert to_builtins(rec)["action"] == "requeue"


def test_declarations_encode_actions_and_window_by_name() -> None:
    d = Declarations(backend="slurm", native_actions=frozenset({Action.REQUEUE}),
                     marks_stops=True)
    assert json.loads(encode(d)) == {"backend": "slurm", "native_actions": ["requeue"],
                                     "node_loss_window": "PT300S", "marks_stops": True}
    assert decode(encode(d), Declarations) == d
    # A record written before backends marked their stops reads as not marking them.
    old = b'{"backend":"slurm","native_actions":["requeue"],"node_loss_window":"PT300S"}'
    assert decode(old, Declarations).marks_stops is False


@pytest.mark.parametrize("raw, field, words", [
    pytest.param(b'{"type":"thermal-event","seq":1,"at":"2026-01-01T00:00:00Z"}', "$.type",
                 "'thermal-event'", id="unknown-event-type"),
    pytest.param(b'{"type":"cancel-requested","seq":1,"at":"2026-01-01T00:00:00Z",'
                 b'"actor":"a","reason":"x"}', "", "`reason`", id="unknown-field"),
    pytest.param(b'{"type":"outcome-committed","seq":1,"at":"2026-01-01T00:00:00Z",'
                 b'"state":"FAILED","cause":{"kind":"none"}}', "$.state", "'FAILED'",
                 id="state-not-by-its-name"),
    pytest.param(b'{"type":"outcome-committed","seq":1,"at":"2026-01-01T00:00:00Z",'
                 b'"state":5,"cause":{"kind":"none"}}', "$.state", "got `int`",
                 id="state-as-int"),
    pytest.param(b'{"type":"hold-placed","seq":1,"at":"2026-01-01T00:00:00Z",'
                 b'"cause":{"kind":"held","provenance":"operator"}}', "$.cause.provenance",
                 "'operator'", id="unknown-provenance"),
    pytest.param(b'{"type":"recovery-started","seq":1,"at":"2026-01-01T00:00:00Z","rule":0,'
                 b'"action":"reboot","cause":{"kind":"preempted"}}', "$.action", "'reboot'",
                 id="unknown-action"),
    pytest.param(b'{"type":"execution-ended","seq":1,"at":"2026-01-01T00:00:00Z",'
                 b'"submission":1,"ref":"r","execution":0,"cause":{"kind":"gpu-fell-off"}}',
                 "$.cause.kind", "'gpu-fell-off'", id="unknown-cause-kind"),
    pytest.param(b'{"type":"gate-opened","seq":1,"at":"2026-01-01T00:00:00Z","ref":"r"}',
                 "", "`submission`", id="missing-field"),  # top level: no path
    pytest.param(b'{"type":"gate-opened","seq":1,"at":"yesterday","submission":1,"ref":"r"}',
                 "$.at", "datetime", id="bad-time"),
])
def test_decode_event_refuses_with_field_and_word(raw: bytes, field: str, words: str) -> None:
    with pytest.raises(DecodeError) as err:
        decode_event(raw, job_id="j", seq=1)
    assert err.value.field == field, str(err.value)
    assert words in str(err.value)
    assert str(err.value).startswith("job j, seq 1")


def test_malformed_json_is_a_decode_error() -> None:
    with pytest.raises(DecodeError) as err:
        decode_event(b'{"type": "created", "seq": 1', job_id="j", seq=1)
    assert "job j" in str(err.value)


def test_an_event_stored_at_another_seq_is_refused() -> None:
    raw = encode_event(ev.CancelRequested(seq=4, at=T0, actor="alice"))
    assert decode_event(raw, seq=4).seq == 4
    with pytest.raises(DecodeError) as err:
        decode_event(raw, job_id="j", seq=5)
    assert err.value.field == "$.seq" and "says seq 4" in str(err.value)


def test_model_documents_refuse_unknown_names_with_their_place() -> None:
    report = ObjectReport(ref="123", token="j.1", state=State.RUNNING,
                          cause=Cause(kind=K.NONE))
    doc = json.loads(encode(report))
    doc["cause"]["kind"] = "cosmic-ray"
    with pytest.raises(DecodeError) as err:
        decode(json.dumps(doc), ObjectReport)
    assert err.value.field == "$.cause.kind" and "'cosmic-ray'" in str(err.value)
    bad_policy = b'{"rules":[{"on":["preempted","solar-flare"],"action":"hold"}]}'
    with pytest.raises(DecodeError) as err:
        decode(bad_policy, RecoveryPolicy)
    assert err.value.field == "$.rules[0].on[1]" and "'solar-flare'" in str(err.value)
    with pytest.raises(DecodeError) as err:
        decode(b'{"on":["preempted"],"action":"hold","retries":1}', Rule)
    assert "`retries`" in str(err.value)
