"""Progress the training reports (G3), read from its ``DISPATCH_PROGRESS_FILE`` (pure).

The training appends JSON lines, one per report: ``{"step": 120, "checkpoint": true}``,
optionally with ``"time"`` (seconds since the epoch, when the checkpoint became durable).
Only checkpoint lines matter to goodput: the latest one is where a restart resumes, so the
run after it is lost work when the execution ends. A file dispatch cannot trust (a link, not
a regular file, over the size bound, a complete line that is not a progress line) is
ignored whole, with a note saying why; it never changes an end or its cause.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from dispatch.errors import BadInput

PROGRESS_FILE_VAR = "DISPATCH_PROGRESS_FILE"
# Only the end of the file is read: the latest checkpoint is near it.
TAIL_BYTES = 64 * 1024
# A progress file past this is not one a training wrote line by line: ignored.
MOST_PROGRESS_FILE_BYTES = 256 * 1024 * 1024
MOST_LINE_BYTES = 4096


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
                 forbid_unknown_fields=True):
    """The latest durable checkpoint an execution's training reported."""

    step: int
    written: datetime


class Progress(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
               forbid_unknown_fields=True):
    """What the progress files of one execution say: its latest checkpoint (None when none
    was reported), and dispatch's note when a file was ignored."""

    checkpoint: Checkpoint | None = None
    note: str = ""


class _Line(msgspec.Struct, frozen=True, kw_only=True):
    step: int
    checkpoint: bool = False
    time: float | None = None


_line = msgspec.json.Decoder(_Line)


class NotAProgressFile(BadInput, ValueError):
    """The bytes are not a progress file dispatch trusts (a job's, so input like any other);
    the message says why."""


def latest_checkpoint(tail: bytes, *, whole: bool, seen_at: datetime,
                      started: datetime | None) -> Checkpoint | None:
    """The latest checkpoint line in ``tail`` (the end of a progress file; ``whole``: the
    file from its start, so the first line is complete). Its time is the line's ``time``,
    else ``seen_at`` (when dispatch read it), kept within [started, seen_at]. A last line
    without its newline is still being written and is skipped. Raises NotAProgressFile."""
    lines = tail.split(b"\n")
    lines.pop()  # after the last newline: empty, or a line being written
    if not whole and lines:
        lines.pop(0)  # the window may start inside a line
    best: _Line | None = None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if len(raw) > MOST_LINE_BYTES:
            raise NotAProgressFile(f"a line of {len(raw)} bytes, more than "
                                   f"{MOST_LINE_BYTES}")
        try:
            parsed = _line.decode(raw)
        except msgspec.DecodeError as err:
            raise NotAProgressFile(f"line {number} of the end read is not a progress line "
                                   f"({err})") from None
        if parsed.step < 0:
            raise NotAProgressFile(f"line {number}: a negative step {parsed.step}")
        if parsed.checkpoint and (best is None or parsed.step >= best.step):
            best = parsed
    if best is None:
        return None
    written = seen_at
    if best.time is not None and best.time == best.time and abs(best.time) < 1e11:
        written = min(seen_at, datetime.fromtimestamp(best.time, UTC))
    if started is not None and written < started:
        written = started
    return Checkpoint(step=best.step, written=written)


def latest(progress: list[Progress]) -> Progress:
    """One execution's progress from its nodes' files: the highest step checkpointed (the
    latest time on a tie), with every note."""
    notes = "; ".join(p.note for p in progress if p.note)
    found = [p.checkpoint for p in progress if p.checkpoint is not None]
    best = max(found, key=lambda c: (c.step, c.written), default=None)
    return Progress(checkpoint=best, note=notes)


# A spec's log pattern (``progress.checkpoint_pattern``): for a training that cannot write
# the progress file, a line of its output that matches says a checkpoint became durable.
# It is an RE2 expression, matched in time linear in the line: a backtracking engine (Python's
# re) spins for ever on ``^(a+)+$`` against ``aaaa...ab``. Linear is not cheap: RE2's work on
# a line grows with its bytes times the pattern's instructions (an NFA step visits each
# instruction once), plus a fixed cost a byte when its DFA cache thrashes (a new state a
# byte: ``a[ab]{16}c`` on random a/b lines, 22 instructions, ~2.7 ms a 4 KiB line), and
# capture groups are copied on every step of its NFA. So the bound is on the cost, not only
# the size: a line is matched only up to MATCH_COST / (instructions + BYTE_COST) bytes,
# and the groups are few. Measured (CPU time, loaded 2-core machine) on the worst patterns
# found: at most ~6 ms a line within these bounds (~11 ms for the first, while RE2 fills its
# cache); ``(?:a?){600}a{600}``, within the old bound of 2000 instructions alone, took 75 ms
# a 4 KiB line.
MOST_PATTERN_CHARS = 500
MOST_PATTERN_PROGRAM = 512
MOST_PATTERN_GROUPS = 16
BYTE_COST = 64  # RE2's fixed cost a byte, in instructions (a DFA state built a byte)
MATCH_COST = 1 << 19  # bytes x (instructions + BYTE_COST) matched in one line, at most
STEP_GROUP = "step"


class ProgressSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The spec's ``progress`` key: an RE2 regular expression matched against each line of
    each node's output (its named group ``step``, when there, is the step)."""

    checkpoint_pattern: str


def _re2_options() -> Any:
    import re2

    options = re2.Options()
    options.log_errors = False  # RE2 would print its own words to stderr: ours say them
    return options


def most_matched_line_bytes(instructions: int) -> int:
    """The longest line a pattern of ``instructions`` RE2 instructions is matched against:
    MOST_LINE_BYTES up to 64 instructions, fewer past that (the cost bound)."""
    return min(MOST_LINE_BYTES, MATCH_COST // (instructions + BYTE_COST))


class CheckpointPattern:
    """A compiled checkpoint pattern: the RE2 program, the number of its ``step`` group
    (None without one), asked once: RE2's wrapper builds its group table on every ask, and
    the longest line it is matched against."""

    def __init__(self, regex: Any) -> None:
        self.regex = regex
        self.step_group: int | None = regex.groupindex.get(STEP_GROUP)
        self.most_line_bytes = most_matched_line_bytes(regex.programsize)


def compile_pattern(text: str) -> CheckpointPattern:
    """The RE2 program of a checkpoint pattern; ValueError (RE2's words) when RE2 cannot
    compile it or it is over the program or group bounds. Bounded by MOST_PATTERN_CHARS
    first."""
    import re2  # here: a status read parses no pattern, and RE2 costs its start-up

    if len(text) > MOST_PATTERN_CHARS:
        raise ValueError(f"is {len(text)} characters, more than {MOST_PATTERN_CHARS}")
    try:
        compiled = re2.compile(text, _re2_options())
    except UnicodeError:  # a lone surrogate: no UTF-8 for RE2 to read
        raise ValueError("is not valid Unicode text") from None
    except re2.error as err:
        words = err.args[0] if err.args else err
        if isinstance(words, bytes):
            words = words.decode(errors="replace")
        raise ValueError(f"is not an RE2 regular expression: {words} (RE2 has no "
                         "backreferences nor lookaround)") from None
    if compiled.programsize > MOST_PATTERN_PROGRAM:
        raise ValueError(f"compiles to {compiled.programsize} RE2 instructions, more than "
                         f"{MOST_PATTERN_PROGRAM} (matching every line would cost too much: "
                         "RE2's work on a line grows with its bytes times the instructions)")
    if compiled.groups > MOST_PATTERN_GROUPS:
        raise ValueError(f"has {compiled.groups} capturing groups, more than "
                         f"{MOST_PATTERN_GROUPS} (RE2 copies them all on every step of a "
                         "line; (?:...) groups without capturing)")
    return CheckpointPattern(compiled)


def pattern_problem(text: str) -> str:
    """Why ``text`` cannot be a checkpoint pattern ("" when it can)."""
    if not text:
        return "must not be empty"
    try:
        compiled = compile_pattern(text)
    except ValueError as err:
        return str(err)
    if compiled.regex.search("") is not None:
        return "matches the empty string, so every line would be a checkpoint"
    return ""


def checkpoint_step(pattern: CheckpointPattern, line: str, count: int) -> int | None:
    """The step a line of output says was checkpointed, or None when it says none.
    ``count``: the node's matching lines before this one, the step when the pattern has no
    ``step`` group. A ``step`` that is not a whole number makes the line say nothing."""
    found = pattern.regex.search(line)
    if found is None or found.end() == found.start():
        return None
    if pattern.step_group is None:
        return count + 1
    step = found.group(pattern.step_group)
    if step is None or not step.isascii() or not step.isdigit() or len(step) > 18:
        return None
    return int(step)
