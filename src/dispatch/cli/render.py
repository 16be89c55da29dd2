"""How jobs look in a terminal. Every name and word that came from a user or a scheduler is
printed as text, never read as Rich markup (a job named "[/]" prints as itself)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from dispatch.core.model import State
from dispatch.service.views import SCHEDULER_OK, JobView, cause_text

if TYPE_CHECKING:
    from rich.table import Table

STATE_STYLE = {
    State.PENDING: "yellow", State.HELD: "magenta", State.RUNNING: "cyan",
    State.RECOVERING: "bold yellow", State.SUCCEEDED: "green", State.FAILED: "bold red",
    State.CANCELLED: "dim", State.UNKNOWN: "red",
}

out = Console(highlight=False, soft_wrap=True, markup=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)


def age(created: datetime | None, now: datetime) -> str:
    if created is None:
        return "-"
    secs = int((now - created).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def state_text(view: JobView) -> Text:
    s = view.status
    if s is None:
        return Text("error", style="bold red")
    text = s.state.value
    if s.forecast is not None:
        text += f" -> {s.forecast.state.value}?"  # what the plan will commit; not yet true
    if view.scheduler != SCHEDULER_OK or not s.scheduler_seen:
        text += "!"  # from the record alone: the scheduler could not be asked
    return Text(text, style=STATE_STYLE[s.state])


def table(rows: Sequence[JobView], now: datetime) -> Table:
    """One row per job; a state marked "!" comes from the record alone (its scheduler could
    not be asked: the caption says why)."""
    from rich.table import Table

    problems = sorted({f"{v.status.backend if v.status else v.job}: scheduler {v.scheduler}: "
                       f"{v.problem}" for v in rows if v.scheduler != SCHEDULER_OK})
    t = Table(box=None, header_style="bold", pad_edge=False,
              caption="\n".join(f"! {p}" for p in problems) or None, caption_justify="left")
    for col in ("JOB", "NAME", "STATE", "CAUSE", "SUBMISSIONS", "BUDGET USED", "AGE"):
        t.add_column(col)
    for v in rows:
        s = v.status
        if s is None:
            t.add_row(Text(v.job), Text("?"), state_text(v), Text(v.problem), "-", "-", "-")
            continue
        used = ", ".join(f"{k}={n}" for k, n in s.budget_used.items() if n) or "-"
        t.add_row(Text(s.job), Text(s.name), state_text(v), Text(cause_text(s.cause)),
                  str(s.submissions), used, age(s.created_at, now))
    return t


def print_status(view: JobView) -> None:
    for line in status_lines(view):
        out.print(line)


def status_lines(view: JobView) -> list[Text]:
    s = view.status
    if s is None:
        return [Text(f"{view.job}: {view.problem}", style="bold red")]
    lines: list[Text] = []
    if view.scheduler != SCHEDULER_OK:
        lines.append(Text(f"scheduler: {view.scheduler}: {view.problem}; the state below is "
                          "the record's last committed one", style="red"))
    lines.append(Text.assemble((s.job, "bold"), f" {s.name}: ",
                               (s.state.value, STATE_STYLE[s.state]),
                               f"  cause: {cause_text(s.cause)}"))
    if s.cause is not None:
        lines.append(Text(f"  provenance: {s.cause.provenance.value}"
                          + (f"  detail: {s.cause.detail}" if s.cause.detail else "")
                          + (f"  note: {s.cause.note}" if s.cause.note else "")))
    if s.forecast is not None:
        lines.append(Text(f"  forecast (not yet committed): {s.forecast.state.value}, "
                          f"cause {cause_text(s.forecast.cause)}", style="italic"))
    lines.append(Text(f"  level: {s.level.value}  submissions: {s.submissions}  objects: "
                      f"{', '.join(s.objects) or '-'}  scope: {s.scope or s.backend}"))
    for x in s.escalations:
        lines.append(Text.assemble(("  escalation", "red"),
                                   f" {x.at:%Y-%m-%d %H:%M:%S} {x.message}"))
    lines += [Text(f"  segment unavailable: {seg}") for seg in s.segments]
    if s.supersedes:
        lines.append(Text(f"  supersedes {s.supersedes}"))
    if s.superseded_by:
        lines.append(Text(f"  superseded by {s.superseded_by}"))
    return lines
