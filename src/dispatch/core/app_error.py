"""The application's own error: the third voice beside the scheduler's ``detail`` and
dispatch's ``note`` (DESIGN: "Three voices, never mixed").

The first failing rank of an execution, and its words: from torchelastic's error file (what
``torch.distributed.elastic.multiprocessing.errors.record`` writes), from the end of the failing
node's output, or from a container's termination message. It is shown and recorded, never used
to classify: the cause kind comes from the scheduler and exit facts only.

Pure: the parsers take bytes or text, never a path.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from enum import StrEnum

import msgspec

from dispatch.errors import BadInput

# What one error keeps of the application's words: at most this many lines and bytes of its
# traceback tail (the message is one line, cut to the same byte bound).
MOST_LINES = 20
MOST_BYTES = 4096
# An error file larger than this is not torchelastic's (it writes one traceback): ignored.
MOST_ERROR_FILE_BYTES = 1 << 20


class ErrorSource(StrEnum):
    """Where the application's words were read (a closed list)."""

    TORCHELASTIC_ERROR_FILE = "torchelastic-error-file"
    OUTPUT_TAIL = "output-tail"
    TERMINATION_MESSAGE = "termination-message"


class AppError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
               forbid_unknown_fields=True):
    """The first failing rank of one execution and its own words.

    ``message``: one line, the application's (the last exception line, or what the error
    file says); ``traceback_tail``: the lines before it, bounded (MOST_LINES / MOST_BYTES).
    Control characters are kept verbatim here and made visible only when shown
    (``visible``). ``note``: dispatch's words about the capture (an error file ignored, and
    why), never the application's.
    """

    source: ErrorSource
    message: str = ""
    rank: int | None = None
    local_rank: int | None = None
    node: str = ""
    exit_code: int | None = None
    signal: int | None = None
    traceback_tail: str = ""
    at: datetime | None = None
    note: str = ""


# Linux's signal numbers (x86-64 and arm64 agree on these), named without the signal module:
# the core does no I/O and reads nothing of the machine it runs on.
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
            7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV",
            12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT",
            17: "SIGCHLD", 18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN",
            22: "SIGTTOU", 23: "SIGURG", 24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM",
            27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR", 31: "SIGSYS"}


def signal_name(signum: int) -> str:
    return _SIGNALS.get(signum, f"SIG{signum}")


def killed_by(signum: int) -> str:
    """"killed by signal 9 (SIGKILL)"."""
    return f"killed by signal {signum} ({signal_name(signum)})"


def _cut_bytes(text: str, most: int) -> str:
    data = text.encode(errors="replace")
    if len(data) <= most:
        return text
    return data[:most].decode(errors="ignore")


def _cut_tail_bytes(text: str, most: int) -> str:
    data = text.encode(errors="replace")
    if len(data) <= most:
        return text
    return data[len(data) - most:].decode(errors="ignore")


def bounded_tail(lines: list[str]) -> str:
    """The last MOST_LINES lines, at most MOST_BYTES bytes (the end is kept)."""
    return _cut_tail_bytes("\n".join(lines[-MOST_LINES:]), MOST_BYTES)


# ---- torchelastic's error file -------------------------------------------------------------

class ErrorFile(msgspec.Struct, frozen=True, kw_only=True):
    """What an error file written by torchelastic's ErrorHandler says."""

    message: str
    traceback: str = ""
    timestamp: int | None = None
    error_code: int | None = None


class NotAnErrorFile(BadInput, ValueError):
    """The bytes are not an error file torchelastic writes (a job's, so input like any
    other); the reason says why."""


def parse_error_file(data: bytes) -> ErrorFile:
    """Read torch's format (ErrorHandler.record_exception / dump_error_file, ProcessFailure):
    ``{"message": {"message": "T: m", "extraInfo": {"py_callstack": "...", "timestamp":
    "1700000000"}, "errorCode": 1}}`` or ``{"message": "text", "timestamp": 1700000000}``.
    Raises NotAnErrorFile naming what is wrong."""
    if len(data) > MOST_ERROR_FILE_BYTES:
        raise NotAnErrorFile(f"it holds {len(data)} bytes, more than the "
                             f"{MOST_ERROR_FILE_BYTES} an error file may")
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise NotAnErrorFile("it is not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise NotAnErrorFile(f"it is not JSON ({err.msg} at line {err.lineno} column "
                             f"{err.colno}); truncated?") from None
    if not isinstance(doc, dict) or "message" not in doc:
        raise NotAnErrorFile("it is JSON without a 'message' field")
    message = doc["message"]
    if isinstance(message, str):
        return ErrorFile(message=message, timestamp=_int_or_none(doc.get("timestamp")))
    if not isinstance(message, dict):
        raise NotAnErrorFile("its 'message' is neither text nor an object")
    text = message.get("message")
    if not isinstance(text, str):
        raise NotAnErrorFile("its message.message is not text")
    extra = message.get("extraInfo", {})
    if not isinstance(extra, dict):
        raise NotAnErrorFile("its message.extraInfo is not an object")
    stack = extra.get("py_callstack", "")
    return ErrorFile(message=text, traceback=stack if isinstance(stack, str) else "",
                     timestamp=_int_or_none(extra.get("timestamp")),
                     error_code=_int_or_none(message.get("errorCode")))


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value.strip()):
        return int(value.strip())
    return None


def from_error_file(parsed: ErrorFile, *, node: str, rank: int | None = None,
                    local_rank: int | None = None, exit_code: int | None = None,
                    signum: int | None = None, at: datetime | None = None) -> AppError:
    """The AppError an error file tells; the message's last line is the one shown."""
    lines = [ln for ln in parsed.message.splitlines() if ln.strip()]
    message = lines[-1].strip() if lines else ""
    tb_lines = [ln for ln in parsed.traceback.splitlines() if ln.strip()]
    if tb_lines and tb_lines[-1].strip() == message:
        tb_lines = tb_lines[:-1]
    when = at
    if parsed.timestamp is not None and 0 < parsed.timestamp < 1 << 34:
        when = datetime.fromtimestamp(parsed.timestamp, UTC)
    # The agent's copy knows the worker's own exit (errorCode): it wins over the launcher's.
    code = parsed.error_code if parsed.error_code is not None else exit_code
    if code is not None and code < 0 and signum is None:
        signum, code = -code, None
    return AppError(source=ErrorSource.TORCHELASTIC_ERROR_FILE,
                    message=_cut_bytes(message, MOST_BYTES), rank=rank, local_rank=local_rank,
                    node=node, exit_code=code, signal=signum,
                    traceback_tail=bounded_tail(tb_lines), at=when)


# ---- the end of a node's output ------------------------------------------------------------

# A Python exception line: "ValueError: x", "torch.cuda.OutOfMemoryError: ...", a bare
# "KeyboardInterrupt" is not one (no colon), nor "  File ...".
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|"
                        r"Warning|Failure|Fault)(?::\s.*|:)?$")
# torchrun's own wrapper, printed after the child's traceback, and its agent's reaction to
# being stopped: never the application's words.
_WRAPPERS = ("ChildFailedError", "SignalException")
# torchrun's "Root Cause (first observed failure):" block.
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_ROOT_HOST = re.compile(r"^\s*host\s*:\s*(\S+)")
_ROOT_TB = re.compile(r"^\s*traceback\s*:\s*(.*)$")
# torchrun puts "[rank1]: " (or "[default0]:") before each line of a worker's output.
_PREFIX = re.compile(r"^\[[\w.-]{1,40}\]:\s?")
_TORCH_SIGNAL = re.compile(r"^Signal (\d+) \(\w+\) received by PID (\d+)$")
_NO_TRACEBACK = "To enable traceback see"
_BORDER = re.compile(r"^[=\-]{8,}$")


class TailReading(msgspec.Struct, frozen=True, kw_only=True):
    """What the end of an output says: the message line, the lines before it, and what
    torchrun's "Root Cause" block adds (rank, local rank, host, exit code)."""

    message: str
    traceback_tail: str = ""
    rank: int | None = None
    local_rank: int | None = None
    host: str = ""
    exit_code: int | None = None


def reduce_output(text: str, host: str = "") -> TailReading:
    """The last Python exception line when there is one (torchrun's ChildFailedError
    wrapper excepted), with the lines before it; else the last non-empty line, with the
    lines before it. Bounded: MOST_LINES lines, MOST_BYTES bytes."""
    lines = [ln.rstrip("\r") for ln in text.splitlines()]
    root = _root_cause(lines, host)
    told = root.pop("message", "")
    # The failing worker's traceback comes before its launcher's Root Cause block; what
    # follows it is the other nodes' launchers reacting (a rendezvous store gone: their own
    # RendezvousConnectionError), never the root cause.
    at = root.pop("at", None)
    end = at if isinstance(at, int) else len(lines)
    found = None
    for i in range(end - 1, -1, -1):
        stripped = _PREFIX.sub("", lines[i].strip())
        if not any(w in stripped for w in _WRAPPERS) and _EXCEPTION.match(stripped):
            found = i
            break
    if found is not None:
        message = _PREFIX.sub("", lines[found].strip())
        before = [ln for ln in lines[:found] if ln.strip()]
    elif isinstance(told, str) and told and not told.startswith(_NO_TRACEBACK):
        # torchrun's words for a rank that left no traceback ("Signal 9 (SIGKILL) received
        # by PID 123", said here as every signal is); the lines before its block are the
        # output's end.
        m = _TORCH_SIGNAL.match(told)
        message = f"{killed_by(int(m.group(1)))} (pid {m.group(2)})" if m else told
        before = [ln for ln in lines if ln.strip() and not _BORDER.match(ln.strip())]
    else:
        kept = [ln for ln in lines if ln.strip() and not _BORDER.match(ln.strip())]
        if not kept:
            return TailReading(message="", **root)  # type: ignore[arg-type]
        message, before = kept[-1].strip(), kept[:-1]
    return TailReading(message=_cut_bytes(message, MOST_BYTES),
                       traceback_tail=bounded_tail(before), **root)  # type: ignore[arg-type]


def _root_cause(lines: list[str], host: str = "") -> dict[str, object]:
    """Rank, local rank, host and exit code from torchrun's "Root Cause" block. One output may
    hold every node's launcher: the last block of ``host`` when given, else the last block
    that is not a launcher stopped by SIGTERM (the others' reaction), else the last. ``at``:
    the index of the block's first line."""
    blocks = [{**_root_block(lines[i + 1:i + 12]), "at": i} for i, ln in enumerate(lines)
              if "Root Cause (first observed failure)" in ln]
    if not blocks:
        return {}
    if host:
        mine = [b for b in blocks if str(b.get("host", "")).split(".")[0] == host]
        if mine:
            return mine[-1]
    causes = [b for b in blocks if b.get("exit_code") != -15]
    return (causes or blocks)[-1]


def _root_block(block: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for ln in block:
        if (m := _ROOT_RANK.match(ln)) is not None:
            out["rank"], out["local_rank"] = int(m.group(1)), int(m.group(2))
        elif (m := _ROOT_EXIT.match(ln)) is not None:
            out["exit_code"] = int(m.group(1))
        elif (m := _ROOT_HOST.match(ln)) is not None:
            out["host"] = m.group(1)
        elif (m := _ROOT_TB.match(ln)) is not None:
            out["message"] = m.group(1).strip()
    return out


# srun's words for a task that failed: "srun: error: n2: task 1: Exited with exit code 1",
# "srun: error: n2: task 1: Killed".
_SRUN = re.compile(r"^srun: error: (\S+): tasks? (\d+)(?:-\d+)?: (.*)$")
_SRUN_EXIT = re.compile(r"Exited with exit code (\d+)")
_SRUN_SIGNALS = {"Killed": 9, "Terminated": 15, "Segmentation fault": 11, "Aborted": 6,
                 "Bus error": 7, "Floating point exception": 8}


class SrunFailure(msgspec.Struct, frozen=True, kw_only=True):
    node: str
    task: int
    exit_code: int | None = None
    signal: int | None = None


def srun_failure(text: str) -> SrunFailure | None:
    """The first task srun reports failed, with its node and how it ended."""
    for ln in text.splitlines():
        m = _SRUN.match(ln.strip())
        if m is None:
            continue
        how = m.group(3)
        code = _SRUN_EXIT.search(how)
        signum = next((n for word, n in _SRUN_SIGNALS.items() if how.startswith(word)), None)
        return SrunFailure(node=m.group(1), task=int(m.group(2)),
                           exit_code=int(code.group(1)) if code else None, signal=signum)
    return None


def from_output(text: str, *, node: str, source: ErrorSource = ErrorSource.OUTPUT_TAIL,
                rank: int | None = None, exit_code: int | None = None,
                signum: int | None = None, at: datetime | None = None,
                note: str = "", host: str = "") -> AppError:
    """The AppError the end of a node's output (or a termination message) tells. What
    torchrun's Root Cause block (of ``host``, when given) says of rank and exit wins over
    what the caller guessed."""
    r = reduce_output(text, host)
    code = r.exit_code if r.exit_code is not None else exit_code
    if code is not None and code < 0:
        signum, code = -code, None
    message = r.message
    if not message and signum is not None:
        message = killed_by(signum)
    return AppError(source=source, message=message,
                    rank=r.rank if r.rank is not None else rank, local_rank=r.local_rank,
                    node=node, exit_code=code, signal=signum,
                    traceback_tail=r.traceback_tail, at=at, note=note)


# ---- shown ---------------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """Control characters made visible (\\x1b, \\r ...): an error's words never drive a
    terminal. Newlines and tabs are kept."""
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text)


def where(e: AppError) -> str:
    """"rank 1 on node1", "node1", "rank 1" or ""."""
    parts = []
    if e.rank is not None:
        parts.append(f"rank {e.rank}"
                     + (f" (local rank {e.local_rank})" if e.local_rank is not None
                        and e.local_rank != e.rank else ""))
    if e.node:
        parts.append(f"on {e.node}" if parts else e.node)
    return " ".join(parts)


def one_line(e: AppError) -> str:
    """``rank 1 on node1: FloatingPointError: loss is NaN`` (control characters visible)."""
    words = e.message
    if e.signal is not None and "signal" not in words.lower():
        words = f"{words} ({killed_by(e.signal)})" if words else killed_by(e.signal)
    elif not words and e.exit_code is not None:
        words = f"exited {e.exit_code}"
    head = where(e)
    text = f"{head}: {words}" if head and words else head or words
    return visible(" ".join(text.split("\n")))


def short(e: AppError, width: int = 60) -> str:
    """A short form for lists: the message only, cut to ``width`` characters."""
    text = one_line(msgspec.structs.replace(e, rank=None, node=""))
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def error_json(e: AppError | None) -> dict[str, object] | None:
    """Every key present (what --json, the API and escalations promise); text verbatim."""
    if e is None:
        return None
    return {"rank": e.rank, "local_rank": e.local_rank, "node": e.node or None,
            "exit_code": e.exit_code, "signal": e.signal,
            "signal_name": signal_name(e.signal) if e.signal is not None else None,
            "message": e.message, "traceback_tail": e.traceback_tail,
            "source": e.source.value, "at": e.at.isoformat() if e.at else None,
            "note": e.note}
