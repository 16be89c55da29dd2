"""How jobs look in a terminal. Every name and word that came from a user or a scheduler is
printed as text, never read as Rich markup (a job named "[/]" prints as itself).

Rich is imported only where it can change what is printed: to a terminal (styles), or for
a table. A status printed to a pipe or a file is written as the same bytes Rich would write
there, without loading Rich (most of the CLI's start-up time for `dispatch status`).
"""

from __future__ import annotations

import builtins
import functools
import os
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple

from dispatch.core import events as ev
from dispatch.core.model import Level, State, Status
from dispatch.service.views import SCHEDULER_OK, JobView, cause_text, recovery_text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from dispatch.core.app_error import AppError
    from dispatch.core.story import Running

STATE_STYLE = {
    State.PENDING: "yellow", State.HELD: "magenta", State.RUNNING: "cyan",
    State.RECOVERING: "bold yellow", State.SUCCEEDED: "green", State.FAILED: "bold red",
    State.CANCELLED: "dim", State.UNKNOWN: "red",
}

# What rich.text.Text drops from every string (rich.control.STRIP_CONTROL_CODES): bell,
# backspace, vertical tab, form feed, carriage return.
_STRIP = {code: None for code in (7, 8, 11, 12, 13)}


# Characters a terminal acts on instead of printing: C0 controls (ESC starts a sequence that
# can retitle or clear the terminal, CR and BS overwrite what is shown), DEL, C1 controls
# (U+009B is a one-character CSI) and lone surrogates (no terminal encoding can write them).
# Tab only moves the cursor forward and is kept.
_ACTIVE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")
_ACTIVE_BUT_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_SHOWN = {"\n": "\\n", "\r": "\\r", "\x1b": "\\x1b"}


def _show(m: re.Match[str]) -> str:
    c = m.group()
    return _SHOWN.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def visible(text: str, *, newlines: bool = False) -> str:
    """``text`` from a person, a scheduler or an application with every character a terminal
    would act on shown as its escape (ESC as ``\\x1b``, CR as ``\\r``); with ``newlines``,
    newlines are kept (for the callers that indent what follows them). Every name and word
    the CLI prints goes through here: the record may hold anything a scheduler said."""
    pattern = _ACTIVE_BUT_NEWLINE if newlines else _ACTIVE
    return pattern.sub(_show, text) if pattern.search(text) else text


# Times are shown in local time with their offset (``+01:00``), or in UTC marked ``UTC`` with
# the global ``--utc`` (or DISPATCH_UTC=1): never a time without its zone.
SHOW_UTC = [os.environ.get("DISPATCH_UTC", "") == "1"]


def when(at: datetime, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    """``at`` as ``fmt`` followed by its zone: local time and its UTC offset, or UTC."""
    if SHOW_UTC[0]:
        return f"{at.astimezone(UTC).strftime(fmt)} UTC"
    local = at.astimezone()
    offset = local.strftime("%z")
    return f"{local.strftime(fmt)} {offset[:3]}:{offset[3:]}"


def history_line(e: ev.Event, text: str, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    """One line of ``dispatch history`` (and of ``run``'s closing story): always one line."""
    return f"{when(e.at, fmt)}  #{e.seq:<3} {visible(text)}"


# The width a table is laid out in when its output is not a terminal (a pipe, a file): wide
# enough that no row is ever cut or wrapped (Rich would otherwise assume 80 columns).
UNBOUNDED_WIDTH = 1 << 20


@functools.cache
def console(stderr: bool = False) -> Console:
    from rich.console import Console

    c = Console(stderr=stderr, highlight=False, soft_wrap=True, markup=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c.width = UNBOUNDED_WIDTH
    return c


def out() -> Console:
    return console()


def err() -> Console:
    return console(stderr=True)


def styles_stdout() -> bool:
    """Whether Rich would treat stdout as a terminal (and so could style or markup what it
    prints): Rich's own test (``Console.is_terminal``), in its order, without Rich."""
    if getattr(sys.stdin, "__module__", "").startswith("idlelib") or hasattr(
            builtins, "get_ipython"):
        return True  # IDLE or IPython/Jupyter: Rich has its own rules there
    tty_compatible = os.environ.get("TTY_COMPATIBLE", "")
    if tty_compatible in ("0", "1"):
        return tty_compatible == "1"
    force_color = os.environ.get("FORCE_COLOR")
    if force_color is not None:
        return force_color != ""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


class Line(NamedTuple):
    """One line of output: pieces, each plain or ``(text, style)``; ``style`` styles the
    whole line (a line with both is not made)."""

    pieces: tuple[str | tuple[str, str], ...]
    style: str = ""

    @property
    def plain(self) -> str:
        return "".join(p if isinstance(p, str) else p[0] for p in self.pieces)

    def text(self) -> Text:
        from rich.text import Text

        if len(self.pieces) == 1 and isinstance(self.pieces[0], str):
            return Text(self.pieces[0], style=self.style)
        return Text.assemble(*self.pieces)


def line(text: str, style: str = "") -> Line:
    return Line((text,), style)


def age(created: datetime | None, now: datetime) -> str:
    if created is None:
        return "-"
    secs = int((now - created).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def state_text(view: JobView) -> Text:
    from rich.text import Text

    s = view.status
    if s is None:
        return Text("error", style="bold red")
    text = s.state.value
    # From the record alone while the scheduler could not be asked; a committed outcome
    # needs no scheduler, so it is never marked.
    if not s.state.terminal and (view.scheduler != SCHEDULER_OK or not s.scheduler_seen):
        text += "!"
    return Text(text, style=STATE_STYLE[s.state])


def forecast_text(view: JobView) -> str:
    """What the plan will commit, not yet true: its own column, never the state's."""
    f = view.status.forecast if view.status is not None else None
    return "" if f is None else f"{f.state.value}?"


def cause_cell(s: Status) -> str:
    """A row's cause: the job's own, and what it recovered from when it did (``none (exit
    0), after 1 recovery: preempted``): a recovered success reads as one."""
    rec = recovery_text(s)
    if not rec:
        return cause_text(s.cause)
    return rec if s.cause is None else f"{cause_text(s.cause)}, {rec}"


def table(rows: Sequence[JobView], now: datetime, width: int | None = None) -> Table:
    """One row per job; a state marked "!" comes from the record alone (its scheduler could
    not be asked: the caption says why). On a terminal (or with ``width``) the table fits
    its width as cli/fit.py says: the application's error is the column that is cut."""
    from rich.cells import cell_len
    from rich.table import Table

    problems = sorted({visible(f"{v.status.backend if v.status else v.job}: scheduler "
                               f"{v.scheduler}: {v.problem}")
                       for v in rows if v.scheduler != SCHEDULER_OK})
    forecasts = any(v.status is not None and v.status.forecast is not None for v in rows)
    errors = any(v.status is not None and v.status.error is not None for v in rows)
    caption = [f"! {p}" for p in problems]
    if forecasts:
        caption.append("FORECAST: what the plan will commit; not yet the state")
    heads = [*COLUMNS, *(["FORECAST"] if forecasts else []), *(["ERROR"] if errors else [])]
    cells = [_cells(v, now, forecasts, errors) for v in rows]
    if width is None and styles_stdout():
        width = out().width
    widths: dict[str, int] | None = None
    natural = {h: max([cell_len(h), *(c[i].cell_len for c in cells)])
               for i, h in enumerate(heads)}
    if width is not None:
        from dispatch.cli.fit import SHORT_HEADERS, fit

        short = {h: max([cell_len(s), *(c[heads.index(h)].cell_len for c in cells)])
                 for h, s in SHORT_HEADERS.items() if h in natural}
        widths = fit(natural, width, short)
        if widths != natural:
            heads_shown = [SHORT_HEADERS.get(h, h) for h in heads]
        else:
            heads_shown = heads
    t = Table(box=None, header_style="bold", pad_edge=False,
              caption="\n".join(caption) or None, caption_justify="left")
    shown = [i for i, h in enumerate(heads) if widths is None or h in widths]
    for i in shown:
        h = heads[i]
        if widths is None:  # a pipe: nothing cut, an error folded rather than lost
            t.add_column(h, overflow="fold" if h == "ERROR" else "ellipsis")
        else:
            t.add_column(heads_shown[i], width=widths[h], no_wrap=True, overflow="ellipsis")
    for c in cells:
        t.add_row(*(c[i] for i in shown))
    return t


def _cells(v: JobView, now: datetime, forecasts: bool, errors: bool) -> list[Text]:
    from rich.text import Text

    s = v.status
    extra = [Text(forecast_text(v), style="italic")] if forecasts else []
    if errors:  # the application's words, short
        extra.append(Text(error_short(s.error) if s is not None and s.error else ""))
    if s is None:
        return [Text(visible(v.job)), Text("?"), state_text(v), Text(visible(v.problem)),
                Text("-"), Text("-"), Text("-"), *extra]
    used = ", ".join(f"{k}={n}" for k, n in s.budget_used.items() if n) or "-"
    return [Text(visible(s.job)), Text(visible(s.name)), state_text(v),
            Text(visible(cause_cell(s))), Text(str(s.submissions)), Text(used),
            Text(age(s.created_at, now)), *extra]


COLUMNS = ("JOB", "NAME", "STATE", "CAUSE", "SUBMISSIONS", "BUDGET USED", "AGE")


PLAIN_COLUMNS = (*COLUMNS, "ERROR")


def plain_rows(rows: Sequence[JobView], now: datetime) -> list[str]:
    """``ls --plain``: a header and one tab-separated line per job, nothing cut or padded
    (tabs and newlines inside a value are shown as escapes, so a row stays one row). The
    last column is the application's error, short (empty when it gave none)."""
    def cell(text: str) -> str:
        return visible(text).replace("\t", "\\t")

    out = ["\t".join(PLAIN_COLUMNS)]
    for v in rows:
        s = v.status
        if s is None:
            out.append("\t".join([cell(v.job), "?", "error", cell(v.problem), "-", "-", "-",
                                  ""]))
            continue
        used = ", ".join(f"{k}={n}" for k, n in s.budget_used.items() if n) or "-"
        out.append("\t".join([cell(s.job), cell(s.name), state_text(v).plain,
                              cell(cause_cell(s)), str(s.submissions), used,
                              age(s.created_at, now),
                              cell(error_short(s.error)) if s.error is not None else ""]))
    return out


def print_table(rows: Sequence[JobView], now: datetime, *, plain: bool = False) -> None:
    """``ls``: a table (as wide as its rows need when stdout is not a terminal), or with
    ``plain`` tab-separated lines."""
    if plain:
        sys.stdout.write("".join(x + "\n" for x in plain_rows(rows, now)))
        sys.stdout.flush()
        return
    console_ = out()
    if console_.is_terminal:
        console_.print(table(rows, now))
        return
    with console_.capture() as captured:  # a pipe: no padding after a row's last word
        console_.print(table(rows, now))
    sys.stdout.write("".join(x.rstrip() + "\n" for x in captured.get().splitlines()))
    sys.stdout.flush()


def next_steps(job_id: str) -> list[Line]:
    """What resolves a recovery hold: the job waits for a person, these are the commands."""
    return [line("  held for you: resolve it with one of", "magenta"),
            line(visible(f"    dispatch resubmit {job_id}    # submit it again (no budget "
                         "spent)")),
            line(visible(f"    dispatch give-up {job_id}     # fail it (escalated)")),
            line(visible(f"    dispatch cancel {job_id}      # or cancel it"))]


def kubernetes_lines() -> list[Line]:
    """Which Kubernetes configuration this process asked through (``status -v`` of a kubeflow
    job): the kubeconfig file(s), context, cluster, server and user, never a credential."""
    from dispatch.backends.kubeflow.origin import origin_from_env
    from dispatch.errors import DispatchError

    try:
        text = origin_from_env().text()
    except DispatchError as err:
        text = f"no usable configuration here: {err}"
    return [line(visible(f"  kubernetes: {text}"), "dim")]


def print_status(view: JobView, extra: Sequence[Line] = (), verbose: bool = False) -> None:
    lines = status_lines(view, verbose) + list(extra)
    plain = [x.plain for x in lines]
    # Rich expands tabs to its tab stops (by cell width): such a line is left to Rich.
    if styles_stdout() or any("\t" in x for x in plain):
        for x in lines:
            out().print(x.text())
        return
    sys.stdout.write("".join(x.translate(_STRIP) + "\n" for x in plain))
    sys.stdout.flush()


def status_lines(view: JobView, verbose: bool = False) -> list[Line]:
    """The status as lines, every name and word made visible (``visible``); a scheduler's
    detail, a note or an escalation that spans lines goes on indented lines of its own.
    ``verbose``: the application error's traceback tail too."""
    s = view.status
    if s is None:
        return [line(visible(f"{view.job}: {view.problem}"), "bold red")]
    lines: list[Line] = []
    if view.scheduler != SCHEDULER_OK:
        lines.append(line(visible(f"scheduler: {view.scheduler}: {view.problem}; the state "
                                  "below is the record's last committed one"), "red"))
    rec = recovery_text(s)
    lines.append(Line(((visible(s.job), "bold"), f" {visible(s.name)}: ",
                       (s.state.value, STATE_STYLE[s.state]), f" {rec}" if rec else "",
                       f"  cause: {visible(cause_text(s.cause))}")))
    if s.cause is not None:
        lines += _indented(f"  provenance: {s.cause.provenance.value}"
                           + (f"  detail: {s.cause.detail}" if s.cause.detail else "")
                           + (f"  note: {s.cause.note}" if s.cause.note else ""))
    if s.error is not None:
        lines += error_lines(s.error, verbose)
    if s.forecast is not None:
        lines.append(line(visible(f"  forecast (not yet committed): {s.forecast.state.value}, "
                                  f"cause {cause_text(s.forecast.cause)}"), "italic"))
    # The usual level (the record and the scheduler) goes unsaid; object-only says why.
    level = "" if s.level is Level.FULL else (
        f"level: {s.level.value} (no record: the scheduler's word alone, never terminal)  ")
    lines.append(line(visible(f"  {level}submissions: {s.submissions}  "
                              f"objects: {', '.join(s.objects) or '-'}  scope: "
                              f"{s.scope or s.backend}")))
    for x in s.escalations:
        first, *rest = _indented(f" {when(x.at)} {x.message}")
        lines.append(Line((("  escalation", "red"), first.plain)))
        lines += rest
    lines += [line(visible(f"  segment unavailable: {seg}")) for seg in s.segments]
    if s.supersedes:
        lines.append(line(visible(f"  supersedes {s.supersedes}")))
    if s.superseded_by:
        lines.append(line(visible(f"  superseded by {s.superseded_by}")))
    return lines


def elapsed(start: datetime, now: datetime) -> str:
    """``3h 12m``, ``12m 5s``, ``40s``: a span to the second, its two largest units."""
    secs = max(0, int((now - start).total_seconds()))
    parts = [(secs // 86400, "d"), (secs // 3600 % 24, "h"), (secs // 60 % 60, "m"),
             (secs % 60, "s")]
    while len(parts) > 1 and parts[0][0] == 0:
        parts.pop(0)
    return " ".join(f"{n}{u}" for n, u in parts[:2])


def running_lines(r: Running | None, now: datetime) -> list[Line]:
    """``status`` of a running job: when its execution started, for how long, and its last
    checkpoint (step, age); each line fits 80 columns."""
    if r is None:
        return []
    ckpt = ("no checkpoint reported" if r.checkpoint_step is None
            or r.checkpoint_written is None else
            f"last checkpoint: step {r.checkpoint_step}, "
            f"{elapsed(r.checkpoint_written, now)} ago")
    return [line(f"  running since {when(r.started)} (elapsed {elapsed(r.started, now)})"),
            line(f"  {ckpt} (submission {r.submission} execution {r.execution})")]


def error_short(e: AppError) -> str:
    """The application's error in a list: its words only (where is in ``status``)."""
    from dispatch.core.app_error import short

    return short(e, width=10_000)


def error_lines(e: AppError, verbose: bool) -> list[Line]:
    """``error: rank 1 on node1: FloatingPointError: loss is NaN`` (the application's
    words, from where), dispatch's note on reading them, and with ``verbose`` the traceback
    tail, each line made visible."""
    from dispatch.core.app_error import one_line

    out = [Line((("  error", "red"), f": {one_line(e)}  ({e.source.value})"))]
    if e.note:
        out.append(line(visible(f"    note: {e.note}")))
    if verbose and e.traceback_tail:
        out += [line(f"    | {visible(t)}") for t in e.traceback_tail.split("\n")]
    return out


def _indented(text: str) -> list[Line]:
    """``text`` made visible, its newlines kept as lines of their own, indented under it."""
    first, *rest = visible(text, newlines=True).split("\n")
    return [line(first)] + [line(f"      {more}") for more in rest]
