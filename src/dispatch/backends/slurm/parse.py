"""Parsers for what the Slurm tools print: squeue --json, sacct -P (-D), sinfo --json,
sbatch --parsable. Pure functions of text; no I/O.

Malformed output raises ``SlurmOutputError`` naming the tool and the place (R4); it never
crashes with a KeyError or a TypeError. Slurm 22.05 (openapi v0.0.38) and 23.11+ (v0.0.40+)
print different shapes for the same facts; both are read here:

- ``job_state``: one string in 22.05 (a flag such as COMPLETING printed *instead of* the base
  state), a list of the base state and its flags from 23.11;
- ``exit_code``: the raw wait status in 22.05 (exit 3 -> 768), a structure
  ``{status: [...], return_code: {set, infinite, number}, signal: {id: {...}, name}}`` from 23.11;
- times: epoch integers in 22.05, ``{set, infinite, number}`` from 23.11.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

# Re-exported: the id notations live in ids.py.
from dispatch.backends.slurm.ids import MAX_ARRAY_TASK_ID as MAX_ARRAY_TASK_ID
from dispatch.backends.slurm.ids import array_task_of as array_task_of
from dispatch.backends.slurm.ids import expand_array_tasks as expand_array_tasks
from dispatch.backends.slurm.ids import expand_nodelist as expand_nodelist
from dispatch.backends.slurm.stop_mark import split_comment
from dispatch.errors import BackendError


class SlurmOutputError(BackendError, ValueError):
    """A Slurm tool printed something we cannot read. Names the tool and where."""

    def __init__(self, tool: str, where: str, message: str) -> None:
        self.tool = tool
        self.where = where
        self.message = message
        super().__init__(f"{tool}: {where}: {message}" if where else f"{tool}: {message}")


class SlurmQueryError(BackendError):
    """The tool answered with errors instead of data (e.g. squeue --json ``errors`` when it
    could not load jobs). Its words, verbatim."""

    def __init__(self, tool: str, words: str) -> None:
        self.tool = tool
        self.words = words
        super().__init__(f"{tool}: {words}")


class ExitStatus(msgspec.Struct, frozen=True, kw_only=True):
    """How a process ended: ``code`` when it exited, ``signal`` when a signal ended it.
    ``text`` keeps what the tool printed, verbatim."""

    code: int | None = None
    signal: int | None = None
    text: str = ""


class SqueueJob(msgspec.Struct, frozen=True, kw_only=True):
    job_id: int
    state: str  # the one state word, as 22.05 prints it (flags win over the base state)
    states: tuple[str, ...] = ()  # every word Slurm gave (23.11+: base state and flags)
    reason: str = ""
    description: str = ""
    exit: ExitStatus | None = None
    derived_exit: ExitStatus | None = None
    restarts: int = 0
    requeue: bool | None = None
    nodes: str = ""
    comment: str = ""  # the token; stop_marked: dispatch's stop mark was on it (stop_mark.py)
    stop_marked: bool = False
    name: str = ""
    partition: str = ""
    array_job_id: int = 0
    array_task_id: int | None = None
    array_task_string: str = ""
    submit_time: datetime | None = None
    eligible_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    standard_output: str = ""
    standard_error: str = ""
    workdir: str = ""

    @property
    def ref(self) -> str:
        return str(self.job_id)


class SqueueSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    release: str
    jobs: tuple[SqueueJob, ...]


class SacctRow(msgspec.Struct, frozen=True, kw_only=True):
    """One line of ``sacct -P``: an allocation (``step`` is None) or one of its steps."""

    job_id: str  # as printed: 123, 123_4, 123.batch, 123+0
    raw_id: str
    step: str | None
    state: str  # verbatim, e.g. "CANCELLED by 0"
    exit: ExitStatus
    derived_exit: ExitStatus | None
    reason: str
    submit: datetime | None
    start: datetime | None
    end: datetime | None
    nodes: str
    partition: str
    comment: str  # the token (stop_mark.split_comment)
    stop_marked: bool = False  # the Comment carries dispatch's stop mark (stop_mark.py)

    @property
    def base_id(self) -> str:
        """The allocation's id: ``123`` for ``123.batch``; the raw id for array tasks."""
        return self.raw_id.split(".", 1)[0]

    @property
    def state_word(self) -> str:
        return self.state.split(" ", 1)[0].upper()


class NodeInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    state: str  # base state, upper case: IDLE, MIXED, ALLOCATED, DOWN, ...
    flags: tuple[str, ...] = ()  # DRAIN, NOT_RESPONDING, COMPLETING, FAIL, ...
    reason: str = ""
    reason_at: datetime | None = None
    reason_by: str | None = None

    @property
    def words(self) -> str:
        return "+".join((self.state, *self.flags))


class SbatchResult(msgspec.Struct, frozen=True, kw_only=True):
    job_id: str
    cluster: str | None = None


# Fields asked of sacct, in this order. Comment is last: it is user text and may hold "|",
# so the line is split into at most len(SACCT_FIELDS) parts.
SACCT_FIELDS: tuple[str, ...] = (
    "JobID", "JobIDRaw", "State", "ExitCode", "DerivedExitCode", "Reason", "Submit", "Start",
    "End", "NodeList", "Partition", "Comment",
)

# A flag printed instead of the base state; the first one set wins (22.05 job_state_string).
STATE_FLAG_ORDER: tuple[str, ...] = (
    "COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING",
)

# ---------------------------------------------------------------------------------- helpers


def _decode_json(tool: str, text: str | bytes) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as err:
        raise SlurmOutputError(tool, "(top)", f"not JSON: {err}") from None


def _field(tool: str, obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise SlurmOutputError(tool, where, f"missing key {key!r}")
    return obj[key]


def _number(tool: str, value: Any, where: str) -> int | None:
    """An integer: a bare one (22.05), or ``{set, infinite, number}`` (23.11+). None when unset
    or infinite."""
    if isinstance(value, bool):
        raise SlurmOutputError(tool, where, f"expected a number, got {value!r}")
    if isinstance(value, int):
        return value
    if value is None:
        return None
    if isinstance(value, dict):
        if value.get("infinite") is True or value.get("set") is False:
            return None
        number = value.get("number")
        if isinstance(number, int) and not isinstance(number, bool):
            return number
    raise SlurmOutputError(tool, where, f"expected a number, got {value!r}")


def _str(tool: str, value: Any, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise SlurmOutputError(tool, where, f"expected a string, got {value!r}")


# Slurm's NO_VAL / INFINITE markers in epoch fields (and its end_time of pending jobs, which is
# a guess far in the future): not a time.
_NOT_A_TIME = 0xFFFFFFFE


def epoch(value: int | None) -> datetime | None:
    if value is None or value <= 0 or value >= _NOT_A_TIME:
        return None
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def wait_status(raw: int) -> ExitStatus:
    """22.05 squeue JSON exit codes are raw wait statuses: exit 3 -> 768, signal 9 -> 9."""
    if raw < 0 or raw >= _NOT_A_TIME:
        return ExitStatus(text=str(raw))
    sig = raw & 0x7F
    if sig == 0:
        return ExitStatus(code=(raw >> 8) & 0xFF, text=str(raw))
    return ExitStatus(signal=sig, text=str(raw))


def _exit_from_json(tool: str, value: Any, where: str) -> ExitStatus | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return wait_status(value)
    if isinstance(value, dict):  # 23.11+: {status, return_code, signal}
        status = value.get("status", [])
        if isinstance(status, str):
            status = [status]
        if not isinstance(status, list) or not all(isinstance(s, str) for s in status):
            raise SlurmOutputError(tool, where + ".status", f"expected a list, got {status!r}")
        code = _number(tool, value.get("return_code"), where + ".return_code")
        signal_obj = value.get("signal", {})
        signal = None
        if isinstance(signal_obj, dict):
            signal = _number(tool, signal_obj.get("id"), where + ".signal.id")
        elif signal_obj is not None:
            raise SlurmOutputError(tool, where + ".signal",
                                   f"expected a mapping, got {signal_obj!r}")
        text = msgspec.json.encode(value).decode()
        if "SIGNALED" in status and signal:
            return ExitStatus(signal=signal, text=text)
        if "PENDING" in status or "INVALID" in status:
            return ExitStatus(text=text)
        return ExitStatus(code=code, signal=signal or None, text=text)
    raise SlurmOutputError(tool, where, f"expected a wait status or a structure, got {value!r}")


def _state_words(tool: str, value: Any, where: str) -> tuple[str, tuple[str, ...]]:
    """The one state word 22.05 would print, and every word given."""
    if isinstance(value, str):
        if not value:
            raise SlurmOutputError(tool, where, "empty job_state")
        return value.upper(), (value.upper(),)
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        words = tuple(v.upper() for v in value)
        for flag in STATE_FLAG_ORDER:
            if flag in words:
                return flag, words
        return words[0], words
    raise SlurmOutputError(tool, where, f"expected a state string or list, got {value!r}")


def _release(tool: str, doc: dict[str, Any]) -> str:
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        return ""
    slurm = meta.get("Slurm", meta.get("slurm"))  # 22.05: "Slurm"; 23.11+: "slurm"
    if isinstance(slurm, dict):
        release = slurm.get("release")
        if isinstance(release, str):
            return release
        version = slurm.get("version")
        if isinstance(version, dict):
            parts = [version.get(k) for k in ("major", "minor", "micro")]
            if all(isinstance(p, (int, str)) for p in parts):
                return ".".join(str(p) for p in parts)
    return ""


def _errors(doc: dict[str, Any]) -> list[str]:
    errors = doc.get("errors") or []
    if not isinstance(errors, list):
        return [repr(errors)]
    words = []
    for err in errors:
        if isinstance(err, dict):
            parts = [str(err.get(k)) for k in ("source", "description", "error")
                     if err.get(k) not in (None, "")]
            words.append(": ".join(parts) or repr(err))
        else:
            words.append(str(err))
    return words


# ---------------------------------------------------------------------------------- squeue


def _document_list(tool: str, text: str | bytes, key: str) -> tuple[dict[str, Any], list[Any]]:
    """A tool's JSON document and its list under ``key``; the tool's own errors (e.g. a
    controller it cannot reach, with exit 0) are SlurmQueryError, never an empty answer."""
    doc = _decode_json(tool, text)
    if not isinstance(doc, dict):
        raise SlurmOutputError(tool, "(top)", "expected a JSON object")
    errors = _errors(doc)
    if errors:
        raise SlurmQueryError(tool, "; ".join(errors))
    items = _field(tool, doc, key, "(top)")
    if not isinstance(items, list):
        raise SlurmOutputError(tool, key, "expected a list")
    return doc, items


def parse_squeue_json(text: str | bytes) -> SqueueSnapshot:
    tool = "squeue --json"
    doc, jobs_raw = _document_list(tool, text, "jobs")
    return SqueueSnapshot(release=_release(tool, doc),
                          jobs=tuple(_squeue_job(tool, j, f"jobs[{i}]")
                                     for i, j in enumerate(jobs_raw)))


def _squeue_job(tool: str, raw: Any, where: str) -> SqueueJob:
    if not isinstance(raw, dict):
        raise SlurmOutputError(tool, where, "expected a JSON object")
    job_id = _number(tool, _field(tool, raw, "job_id", where), where + ".job_id")
    if job_id is None or job_id <= 0:
        raise SlurmOutputError(tool, where + ".job_id", "not a job id")
    state, states = _state_words(tool, _field(tool, raw, "job_state", where), where + ".job_state")

    def s(key: str) -> str:
        return _str(tool, raw.get(key), f"{where}.{key}")

    def t(key: str) -> datetime | None:
        return epoch(_number(tool, raw.get(key), f"{where}.{key}"))

    requeue = raw.get("requeue")
    return SqueueJob(
        job_id=job_id,
        state=state,
        states=states,
        reason=s("state_reason"),
        description=s("state_description"),
        exit=_exit_from_json(tool, raw.get("exit_code"), where + ".exit_code"),
        derived_exit=_exit_from_json(tool, raw.get("derived_exit_code"),
                                     where + ".derived_exit_code"),
        restarts=_number(tool, raw.get("restart_cnt", 0), where + ".restart_cnt") or 0,
        requeue=requeue if isinstance(requeue, bool) else None,
        nodes=s("nodes"),
        comment=(mark := split_comment(s("comment")))[0], stop_marked=mark[1],
        name=s("name"),
        partition=s("partition"),
        array_job_id=_number(tool, raw.get("array_job_id", 0), where + ".array_job_id") or 0,
        array_task_id=_number(tool, raw.get("array_task_id"), where + ".array_task_id"),
        array_task_string=s("array_task_string"),
        submit_time=t("submit_time"),
        eligible_time=t("eligible_time"),
        start_time=t("start_time"),
        end_time=t("end_time"),
        standard_output=s("standard_output"),
        standard_error=s("standard_error"),
        workdir=s("current_working_directory"),
    )


# ---------------------------------------------------------------------------------- sacct


def parse_exit_pair(text: str) -> ExitStatus:
    """sacct's ``code:signal``. 22.05 and 24.11 print codes >= 128 less 128 (exit 137 -> 9:0),
    26.05 prints them as they are (137:0): the code is kept as printed, the verbatim text says
    so; squeue is the better source."""
    text = text.strip()
    if not text:
        return ExitStatus(text="")
    code_s, sep, sig_s = text.partition(":")
    if not sep or not code_s.isdigit() or not sig_s.isdigit():
        raise ValueError(f"not an exit code pair: {text!r}")
    code, sig = int(code_s), int(sig_s)
    if sig:
        return ExitStatus(code=code or None, signal=sig, text=text)
    return ExitStatus(code=code, text=text)


def parse_sacct_time(text: str) -> datetime | None:
    """sacct prints local time without a zone, or Unknown / None for no time."""
    text = text.strip()
    if text in ("", "Unknown", "None", "N/A"):
        return None
    try:
        naive = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a time: {text!r}") from None
    if naive.tzinfo is not None:
        return naive.astimezone(UTC)
    return naive.astimezone().astimezone(UTC)  # naive = this machine's local time


def parse_sacct(text: str, fields: tuple[str, ...] = SACCT_FIELDS) -> tuple[SacctRow, ...]:
    """``sacct -P -o <fields>`` with its header line. Rows keep sacct's order."""
    tool = "sacct -P"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise SlurmOutputError(tool, "(top)", "no header line")
    header = tuple(lines[0].split("|"))
    if header != fields:
        raise SlurmOutputError(tool, "line 1", f"unexpected header {lines[0]!r}, "
                               f"wanted {'|'.join(fields)}")
    return tuple(_sacct_row(tool, line, fields, f"line {n}")
                 for n, line in enumerate(lines[1:], start=2))


def _sacct_row(tool: str, line: str, fields: tuple[str, ...], where: str) -> SacctRow:
    parts = line.split("|", len(fields) - 1)
    if len(parts) != len(fields):
        raise SlurmOutputError(tool, where, f"expected {len(fields)} fields, got {len(parts)}: "
                               f"{line!r}")
    v = dict(zip(fields, parts, strict=True))
    job_id = v["JobID"].strip()
    raw_id = v["JobIDRaw"].strip() or job_id
    if not job_id or not job_id.split(".", 1)[0].split("_", 1)[0].split("+", 1)[0].isdigit():
        raise SlurmOutputError(tool, where, f"not a job id: {job_id!r}")
    step = job_id.split(".", 1)[1] if "." in job_id else None
    state = v["State"].strip()
    if not state:
        raise SlurmOutputError(tool, where, "empty State")
    try:
        exit_ = parse_exit_pair(v["ExitCode"])
        derived = parse_exit_pair(v["DerivedExitCode"]) if v["DerivedExitCode"].strip() else None
        submit = parse_sacct_time(v["Submit"])
        start = parse_sacct_time(v["Start"])
        end = parse_sacct_time(v["End"])
    except ValueError as err:
        raise SlurmOutputError(tool, where, str(err)) from None
    comment, marked = split_comment(v["Comment"])
    return SacctRow(job_id=job_id, raw_id=raw_id, step=step, state=state, exit=exit_,
                    derived_exit=derived, reason=v["Reason"].strip(), submit=submit,
                    start=start, end=end, nodes=v["NodeList"].strip(),
                    partition=v["Partition"].strip(), comment=comment, stop_marked=marked)


def group_sacct(rows: tuple[SacctRow, ...]) -> dict[str, list[tuple[SacctRow, list[SacctRow]]]]:
    """Allocation rows by job id, each with the step rows printed after it. ``sacct -D`` prints
    one allocation row per execution of a requeued job, in order, each followed by its steps."""
    out: dict[str, list[tuple[SacctRow, list[SacctRow]]]] = {}
    current: tuple[SacctRow, list[SacctRow]] | None = None
    for row in rows:
        if row.step is None:
            current = (row, [])
            out.setdefault(row.base_id, []).append(current)
        elif current is not None and current[0].base_id == row.base_id:
            current[1].append(row)
    return out


# ---------------------------------------------------------------------------------- sbatch


def parse_sbatch_parsable(text: str) -> SbatchResult:
    """``sbatch --parsable`` prints ``jobid`` or ``jobid;cluster`` (perhaps after warnings)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise SlurmOutputError("sbatch --parsable", "(top)", "printed nothing")
    last = lines[-1]
    job_id, sep, cluster = last.partition(";")
    if not job_id.isdigit():
        raise SlurmOutputError("sbatch --parsable", "(top)", f"not a job id: {last!r}")
    return SbatchResult(job_id=job_id, cluster=cluster if sep and cluster else None)


# ---------------------------------------------------------------------------------- arrays


def group_sacct_array_tasks(
    grouped: dict[str, list[tuple[SacctRow, list[SacctRow]]]],
) -> dict[str, dict[str, list[tuple[SacctRow, list[SacctRow]]]]]:
    """``group_sacct``'s groups (keyed by each task's own raw id) re-keyed by array job id
    and task id. A row for tasks not yet started (``123_[1-3]``) stands for each of them that
    has no row of its own."""
    out: dict[str, dict[str, list[tuple[SacctRow, list[SacctRow]]]]] = {}
    pending: list[tuple[str, str, tuple[SacctRow, list[SacctRow]]]] = []
    for groups in grouped.values():
        for group in groups:
            found = array_task_of(group[0].job_id)
            if found is None:
                continue
            array_id, task = found
            if task.isdigit():
                out.setdefault(array_id, {}).setdefault(task, []).append(group)
            else:
                pending.append((array_id, task, group))
    for array_id, task_text, group in pending:
        try:
            tasks = expand_array_tasks(task_text)
        except ValueError:
            tasks = (task_text,)  # keep the words rather than guess at ids
        by_task = out.setdefault(array_id, {})
        for task in tasks:
            if task not in by_task:
                by_task[task] = [group]
    return out
