"""Issue 23: the application's own error (the third voice), pure parts: torchelastic's error
file, the output-tail reducer, signal names, how an error is shown, and how it is recorded
(once per execution, beside the end, never changing the cause)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from tests.strategies_core import T0, Sim, ended, rule

from dispatch.core import events as ev
from dispatch.core.app_error import (
    MOST_BYTES,
    MOST_ERROR_FILE_BYTES,
    MOST_LINES,
    AppError,
    ErrorSource,
    NotAnErrorFile,
    error_json,
    from_error_file,
    from_output,
    killed_by,
    one_line,
    parse_error_file,
    reduce_output,
    short,
    visible,
)
from dispatch.core.codec import DecodeError, decode_event, encode_event
from dispatch.core.decide import Escalate, RecordEnd, RecordError
from dispatch.core.model import Cause, CauseKind, Execution, Provenance, State
from dispatch.core.policy import Action
from dispatch.core.story import line

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "torchelastic"

TRACEBACK = ('Traceback (most recent call last):\n  File "/w/train.py", line 12, in main\n'
             '    raise FloatingPointError("loss is NaN")\nFloatingPointError: loss is NaN\n')


# ---- torchelastic's error file -----------------------------------------------------------

def test_the_worker_format_record_exception_writes() -> None:
    data = json.dumps({"message": {"message": "FloatingPointError: loss is NaN",
                                   "extraInfo": {"py_callstack": TRACEBACK,
                                                 "timestamp": "1764650000"}}}).encode()
    parsed = parse_error_file(data)
    assert parsed.message == "FloatingPointError: loss is NaN"
    assert parsed.traceback == TRACEBACK
    assert parsed.timestamp == 1764650000
    assert parsed.error_code is None


def test_the_agent_copy_carries_the_error_code() -> None:
    # dump_error_file: the child's file with message.errorCode set to the exit code.
    data = json.dumps({"message": {"message": "ValueError: x", "extraInfo": {
        "py_callstack": "tb", "timestamp": "1"}, "errorCode": 1}}).encode()
    assert parse_error_file(data).error_code == 1


def test_a_string_message_with_its_own_timestamp() -> None:
    parsed = parse_error_file(b'{"message": "Signal 9 (SIGKILL) received", "timestamp": 17}')
    assert (parsed.message, parsed.timestamp, parsed.traceback) == (
        "Signal 9 (SIGKILL) received", 17, "")


@pytest.mark.parametrize(("data", "why"), [
    (b'{"message": {"message": "ValueError: x", "extraInfo": {"py_call', "not JSON"),
    (b"not json at all", "not JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[1, 2]", "without a 'message'"),
    (b'{"msg": "x"}', "without a 'message'"),
    (b'{"message": 3}', "neither text nor an object"),
    (b'{"message": {"message": 3}}', "message.message is not text"),
    (b'{"message": {"message": "x", "extraInfo": []}}', "extraInfo is not an object"),
    (b" " * (MOST_ERROR_FILE_BYTES + 1), "more than"),
])
def test_what_is_not_an_error_file_is_refused_with_why(data: bytes, why: str) -> None:
    with pytest.raises(NotAnErrorFile, match=why):
        parse_error_file(data)


def test_from_error_file_keeps_the_last_line_and_the_traceback_before_it() -> None:
    parsed = parse_error_file(json.dumps({"message": {"message": "FloatingPointError: loss is "
                                                                 "NaN", "extraInfo": {
        "py_callstack": TRACEBACK, "timestamp": "1764650000"}, "errorCode": 1}}).encode())
    e = from_error_file(parsed, node="node1", rank=1)
    assert e.source is ErrorSource.TORCHELASTIC_ERROR_FILE
    assert (e.message, e.rank, e.node, e.exit_code) == (
        "FloatingPointError: loss is NaN", 1, "node1", 1)
    assert e.traceback_tail.startswith("Traceback (most recent call last):")
    assert "FloatingPointError: loss is NaN" not in e.traceback_tail  # not said twice
    assert e.at == datetime.fromtimestamp(1764650000, UTC)


def test_a_negative_error_code_is_a_signal() -> None:
    parsed = parse_error_file(b'{"message": {"message": "x", "errorCode": -9}}')
    e = from_error_file(parsed, node="n")
    assert (e.exit_code, e.signal) == (None, 9)


def test_real_torchrun_error_files_parse() -> None:
    """Files written by the real torch 2.13 torchrun (see fixtures/torchelastic/README)."""
    files = sorted(FIXTURES.glob("*.json"))
    assert files, f"no fixtures under {FIXTURES}"
    for path in files:
        parsed = parse_error_file(path.read_bytes())
        assert parsed.message == "FloatingPointError: loss is NaN at step 7", path
        assert parsed.error_code == 1, path
        assert "Traceback (most recent call last)" in parsed.traceback, path
        assert parsed.timestamp is not None and parsed.timestamp > 1_700_000_000, path


# ---- the end of a node's output -----------------------------------------------------------

@pytest.mark.parametrize(("text", "message", "tail_has"), [
    ("step 1\nstep 2\n" + TRACEBACK, "FloatingPointError: loss is NaN", "raise Floating"),
    ("loading\nsegfault in kernel\n\n\n", "segfault in kernel", "loading"),
    ("", "", ""),
    ("\n  \n", "", ""),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nbye\n",
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", ""),
    ("KeyError: 'lr'\nsome later line\n", "KeyError: 'lr'", ""),
    ("RuntimeError:\n", "RuntimeError:", ""),
])
def test_reduce_output(text: str, message: str, tail_has: str) -> None:
    r = reduce_output(text)
    assert r.message == message
    assert tail_has in r.traceback_tail


TORCHRUN_TAIL = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/w/train.py", line 9, in <module>
[rank1]:     main()
[rank1]: FloatingPointError: loss is NaN
E1202 04:40:01.000000 123 torch/distributed/elastic/multiprocessing/api.py:900] failed
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_04:40:01
  host      : node2
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 4242)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_torchruns_wrapper_is_not_the_applications_words() -> None:
    r = reduce_output(TORCHRUN_TAIL)
    assert r.message == "FloatingPointError: loss is NaN"  # without torchrun's prefix
    assert (r.rank, r.local_rank, r.exit_code, r.host) == (3, 1, 1, "node2")


def test_torchruns_root_cause_for_a_signal() -> None:
    text = TORCHRUN_TAIL.replace("exitcode  : 1 (pid: 4242)",
                                 "exitcode  : -9 (pid: 4242) (SIGKILL)").replace(
        "traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/"
        "errors.html", "traceback : Signal 9 (SIGKILL) received by PID 4242").replace(
        "[rank1]: FloatingPointError: loss is NaN\n", "")
    e = from_output(text, node="node2")
    assert e.signal == 9 and e.exit_code is None
    assert e.message == "killed by signal 9 (SIGKILL) (pid 4242)"
    assert one_line(e) == "rank 3 (local rank 1) on node2: killed by signal 9 (SIGKILL) (pid 4242)"
    assert (e.rank, e.local_rank) == (3, 1)


def test_the_tail_is_bounded() -> None:
    text = "".join(f"line {i} " + "x" * 300 + "\n" for i in range(500)) + "ValueError: end\n"
    r = reduce_output(text)
    assert r.message == "ValueError: end"
    assert len(r.traceback_tail.splitlines()) <= MOST_LINES
    assert len(r.traceback_tail.encode()) <= MOST_BYTES
    assert "line 499" in r.traceback_tail  # the end is kept
    huge = reduce_output("E" * 100_000)
    assert len(huge.message.encode()) <= MOST_BYTES


def test_control_characters_are_kept_and_shown_visibly() -> None:
    e = from_output("ValueError: \x1b[31mred\x1b[0m\r\n", node="node0")
    assert "\x1b[31m" in e.message  # verbatim in the record
    assert "\x1b" not in one_line(e) and "\\x1b[31mred" in one_line(e)
    assert visible("a\tb\nc\x07") == "a\tb\nc\\x07"


# ---- signals and how an error reads ------------------------------------------------------

@pytest.mark.parametrize(("signum", "text"), [
    (9, "killed by signal 9 (SIGKILL)"), (15, "killed by signal 15 (SIGTERM)"),
    (11, "killed by signal 11 (SIGSEGV)"), (6, "killed by signal 6 (SIGABRT)"),
    (200, "killed by signal 200 (SIG200)"),
])
def test_killed_by(signum: int, text: str) -> None:
    assert killed_by(signum) == text


@pytest.mark.parametrize(("error", "text"), [
    (AppError(source=ErrorSource.OUTPUT_TAIL, rank=1, node="node1",
              message="FloatingPointError: loss is NaN"),
     "rank 1 on node1: FloatingPointError: loss is NaN"),
    (AppError(source=ErrorSource.OUTPUT_TAIL, node="node1", signal=9),
     "node1: killed by signal 9 (SIGKILL)"),
    (AppError(source=ErrorSource.OUTPUT_TAIL, rank=3, local_rank=1, node="n2",
              message="oops", signal=9),
     "rank 3 (local rank 1) on n2: oops (killed by signal 9 (SIGKILL))"),
    (AppError(source=ErrorSource.TERMINATION_MESSAGE, message="", exit_code=2),
     "exited 2"),
    (AppError(source=ErrorSource.OUTPUT_TAIL, message="two\nlines"), "two lines"),
])
def test_one_line(error: AppError, text: str) -> None:
    assert one_line(error) == text


def test_short_form_is_cut() -> None:
    e = AppError(source=ErrorSource.OUTPUT_TAIL, rank=1, node="node1", message="E" * 200)
    assert len(short(e, 40)) == 40 and short(e, 40).endswith("…")


def test_error_json_has_every_key() -> None:
    e = AppError(source=ErrorSource.OUTPUT_TAIL, message="x", signal=9)
    doc = error_json(e)
    assert doc is not None
    assert set(doc) == {"rank", "local_rank", "node", "exit_code", "signal", "signal_name",
                        "message", "traceback_tail", "source", "at", "note"}
    assert doc["signal_name"] == "SIGKILL" and doc["source"] == "output-tail"
    assert error_json(None) is None


# ---- the record: once per execution, beside the end, never the cause --------------------

NAN = AppError(source=ErrorSource.OUTPUT_TAIL, rank=1, node="node1",
               message="FloatingPointError: loss is NaN", exit_code=2)


def _failed(error: AppError | None, *, number: int = 1) -> list:
    c = Cause(kind=CauseKind.NON_ZERO_EXIT, provenance=Provenance.APPLICATION,
              detail="node1 exited 2", exit_code=2)
    return [ended(number, CauseKind.NON_ZERO_EXIT, cause_=c, executions=(
        Execution(index=0, started_at=T0, ended_at=T0, cause=c, error=error),))]


def test_an_end_with_an_error_records_it_beside_the_end() -> None:
    sim = Sim([rule([CauseKind.NON_ZERO_EXIT], Action.ESCALATE)])
    sim.tick([])  # submit
    decisions = sim.tick(_failed(NAN))
    ends = [d for d in decisions if isinstance(d, RecordEnd)]
    errs = [d for d in decisions if isinstance(d, RecordError)]
    assert len(ends) == 1 and len(errs) == 1
    assert ends[0].cause.kind is CauseKind.NON_ZERO_EXIT  # unchanged by the error
    assert errs[0].error == NAN and (errs[0].submission, errs[0].execution) == (1, 0)
    # the escalation carries it, labelled as the application's
    esc = [d for d in decisions if isinstance(d, Escalate)]
    assert esc and esc[0].error == NAN
    assert esc[0].message.endswith("application error: rank 1 on node1: "
                                   "FloatingPointError: loss is NaN")
    assert sim.job.error == NAN
    st = sim.status(_failed(NAN))
    assert st.state is State.FAILED and st.error == NAN
    assert st.cause is not None and st.cause.kind is CauseKind.NON_ZERO_EXIT
    assert "FloatingPointError" not in st.cause.detail + st.cause.note
    # a later look at the same end records nothing again
    assert not [d for d in sim.tick(_failed(NAN)) if isinstance(d, RecordError)]


def test_an_end_without_an_error_records_none() -> None:
    sim = Sim([rule([CauseKind.NON_ZERO_EXIT], Action.ESCALATE)])
    sim.tick([])
    decisions = sim.tick(_failed(None))
    assert not [d for d in decisions if isinstance(d, RecordError)]
    assert sim.status(_failed(None)).error is None


def test_a_recovered_job_running_again_shows_no_old_error_but_history_keeps_it() -> None:
    sim = Sim([rule([CauseKind.NON_ZERO_EXIT], Action.RESUBMIT, budget=1)])
    sim.tick([])
    sim.tick(_failed(NAN))
    assert sim.status(None).state is State.RECOVERING and sim.status(None).error == NAN
    from tests.strategies_core import obj
    running = [*_failed(NAN), obj(2, State.RUNNING, executions=(
        Execution(index=0, started_at=T0),))]
    sim.tick(running)
    assert sim.status(running).state is State.RUNNING
    assert sim.status(running).error is None
    lines = [line(e) for e in sim.record if isinstance(e, ev.ApplicationErrorRecorded)]
    assert lines == ["application error (submission 1 execution 0, from output-tail): "
                     "rank 1 on node1: FloatingPointError: loss is NaN"]


def test_a_second_error_for_the_same_execution_is_ignored_by_fold() -> None:
    sim = Sim([rule([CauseKind.NON_ZERO_EXIT], Action.ESCALATE)])
    sim.tick([])
    sim.tick(_failed(NAN))
    other = msgspec.structs.replace(NAN, message="other")
    sim.inject(ev.ApplicationErrorRecorded, submission=1, execution=0, error=other)
    assert sim.job.error == NAN and len(sim.job.errors) == 1


def test_the_story_line_carries_dispatchs_note_apart() -> None:
    e = ev.ApplicationErrorRecorded(seq=5, at=T0, submission=1, execution=0, error=AppError(
        source=ErrorSource.OUTPUT_TAIL, node="node0", message="bye",
        note="error file ignored: it is a symbolic link"))
    assert line(e) == ("application error (submission 1 execution 0, from output-tail): "
                       "node0: bye [dispatch: error file ignored: it is a symbolic link]")


# ---- the codec: versioned, strict -------------------------------------------------------

def test_the_event_round_trips_and_a_later_format_is_refused() -> None:
    e = ev.ApplicationErrorRecorded(seq=3, at=T0, submission=1, execution=0, error=NAN)
    raw = encode_event(e)
    assert b'"type":"application-error"' in raw and b"format" not in raw
    assert decode_event(raw) == e
    doc = json.loads(raw)
    assert decode_event(json.dumps({**doc, "format": 1})) == e
    with pytest.raises(DecodeError, match="format"):
        decode_event(json.dumps({**doc, "format": 2}))
    with pytest.raises(DecodeError, match="source"):
        decode_event(json.dumps({**doc, "error": {**doc["error"], "source": "stderr"}}))
    with pytest.raises(DecodeError, match="colour"):
        decode_event(json.dumps({**doc, "error": {**doc["error"], "colour": "red"}}))


def test_an_older_execution_without_error_still_reads() -> None:
    raw = (b'{"type":"execution-ended","seq":3,"at":"2026-01-01T00:00:00Z","submission":1,'
           b'"ref":"r1","execution":0,"cause":{"kind":"non-zero-exit","exit_code":2}}')
    e = decode_event(raw)
    assert isinstance(e, ev.ExecutionEnded) and e.cause.exit_code == 2


@pytest.mark.parametrize(("name", "message", "exit_code", "signum"), [
    ("rec", "FloatingPointError: loss is NaN at step 7", 1, None),
    ("norec", "FloatingPointError: loss is NaN at step 7", 1, None),
    ("kill", "killed by signal 9 (SIGKILL) (pid 5206)", None, 9),
])
def test_real_torchrun_output_tails(name: str, message: str, exit_code: int | None,
                                    signum: int | None) -> None:
    text = (FIXTURES / f"torchrun-output-{name}.txt").read_text()
    e = from_output(text, node="node0")
    assert (e.message, e.rank, e.local_rank, e.exit_code, e.signal) == (
        message, 1, 1, exit_code, signum)
    if name == "norec":
        assert 'raise FloatingPointError("loss is NaN at step 7")' in e.traceback_tail


def test_another_launchers_words_after_the_root_cause_are_not_the_error() -> None:
    """A real Slurm 22.05 output (one file for both nodes): rank 3 raised, then the other
    node's torchrun lost its rendezvous store and printed RendezvousConnectionError last. The
    worker's exception before the Root Cause block is the error, not that."""
    text = (FIXTURES / "slurm-output-norec-store-lost.txt").read_text()
    assert text.rstrip().splitlines()[-6].startswith(
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError")
    e = from_output(text, node="n2", host="n2")
    assert (e.message, e.rank, e.local_rank, e.exit_code) == (
        "FloatingPointError: loss is NaN at step 7", 3, 1, 1)
    assert 'raise FloatingPointError("loss is NaN at step 7")' in e.traceback_tail
