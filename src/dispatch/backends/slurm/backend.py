"""The Slurm backend: the imperative shell around parse.py, mapping.py and script.py.

Per discover() (P2): one compact ``squeue -u <user> -O ...`` for the submitting user's jobs
(compact.py; ``squeue --json`` in 22.05 ignores -u/-j and prints every job of the cluster),
one ``scontrol show node -o`` for the nodes our live jobs hold, only when one holds nodes and
``nodes.node_read_due`` says so (every ``node_interval``, or at once for new or unhealthy
nodes), and at most one ``sacct -P -D``
covering only the jobs that ended, whose restart count grew, or that left squeue since the
last look. Answers confirmed by accounting are cached, so a steady tick costs no sacct.
Objects are found by their token (``--comment``) even when the caller never learnt the ref.

Every tool runs from an argv list (never a shell). A controller or database that cannot be
reached raises ``SchedulerUnreachable``: never a state.
"""

from __future__ import annotations

import os
import pwd
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dispatch.backends.base import DryRun, Submission, SubmitRejected
from dispatch.backends.slurm import app_errors, ending, mapping, node_health, progress
from dispatch.backends.slurm.array_mapping import array_report
from dispatch.backends.slurm.compact import parse_squeue_compact, squeue_argv
from dispatch.backends.slurm.nodes import (
    node_read_due,
    parse_scontrol_nodes,
    parse_sinfo_json,
    scontrol_node_argv,
)
from dispatch.backends.slurm.parse import (
    SACCT_FIELDS,
    NodeInfo,
    SacctRow,
    SlurmOutputError,
    SlurmQueryError,
    SqueueJob,
    array_task_of,
    expand_array_tasks,
    expand_nodelist,
    group_sacct,
    group_sacct_array_tasks,
    parse_sacct,
    parse_sbatch_parsable,
    parse_squeue_json,
)
from dispatch.backends.slurm.script import (
    default_output_dir,
    render,
    script_path,
    validate_spec,
)
from dispatch.backends.slurm.scriptfile import write_script
from dispatch.backends.slurm.tools import (
    ALREADY_ENDED_WORDS,
    NAME,
    Result,
    Runner,
    SlurmCommandError,
    run_tool,
    unreachable_words,
)
from dispatch.core.model import Discovery, ObjectReport, SchedulerUnreachable, State
from dispatch.core.policy import Action, Declarations
from dispatch.core.spec import JobSpec


class SlurmBackend:
    name = NAME

    def __init__(self, *, node_loss_window: timedelta = timedelta(seconds=60),
                 output_dir: Path | None = None, runner: Runner = run_tool,
                 clock: Callable[[], datetime] | None = None, timeout: float = 30.0,
                 token_lookback: timedelta = timedelta(days=7),
                 preempt_mode: str = "REQUEUE", user: str | None = None,
                 queries: str = "compact", node_interval: timedelta | None = None) -> None:
        # queries: "compact" (the tick: our user's jobs, our nodes) or "json" (squeue --json
        # and sinfo --json of the whole cluster, as before; kept for the recorded-output tests).
        if queries not in ("compact", "json"):
            raise ValueError(f"queries must be 'compact' or 'json', not {queries!r}")
        self._queries = queries
        self._user = user or pwd.getpwuid(os.geteuid()).pw_name
        self.node_loss_window = node_loss_window
        # How stale a healthy node view may get: a quarter of the loss window (a lost node is
        # seen within it), at most 30 s (segment health); see nodes.node_read_due.
        self.node_interval = node_interval if node_interval is not None \
            else min(node_loss_window / 4, timedelta(seconds=30))
        self.output_dir = output_dir if output_dir is not None else default_output_dir()
        self._run = runner
        self._clock = clock or (lambda: datetime.now(UTC))
        self._timeout = timeout
        # An sbatch child outlives a supervisor killed while waiting on it by at most its own
        # timeout (tools.run_tool kills it then; sbatch itself gives up no later).
        self.submit_in_flight = timedelta(seconds=timeout)
        self._token_lookback = token_lookback
        self._preempt_mode = preempt_mode
        self.calls: Counter[str] = Counter()  # tool -> calls made (P2 benchmark)
        self._final: dict[str, ObjectReport] = {}  # ref -> ended report confirmed by sacct
        self._groups: dict[str, list[tuple[SacctRow, list[SacctRow]]]] = {}
        self._ended_known: dict[str, int] = {}  # ref -> ended executions sacct has shown
        self._token_of: dict[str, str] = {}  # ref -> token
        self._ref_of: dict[str, str] = {}  # token -> newest ref
        self._lost_since: dict[str, datetime] = {}
        self._held: set[str] = set()
        self._absent_tokens: set[str] = set()  # searched in accounting, not found
        self._outputs: dict[str, str] = {}  # ref -> output file
        self._nodes: dict[str, NodeInfo] = {}
        self._nodes_read_at: datetime | None = None
        # Job arrays (one object each, named by the array job id; see mapping.array_report).
        self._arrays: set[str] = set()
        self._array_tasks: dict[str, set[str]] = {}  # ref -> every task id seen
        self._array_groups: dict[str, dict[str, list[tuple[SacctRow, list[SacctRow]]]]] = {}
        self._task_final: dict[str, dict[str, ObjectReport]] = {}  # ref -> task -> ended

    # ------------------------------------------------------------------ declarations

    def declarations(self) -> Declarations:
        return Declarations(backend=NAME, native_actions=frozenset({Action.REQUEUE}),
                            node_loss_window=self.node_loss_window, marks_stops=True)

    # ------------------------------------------------------------------ tools

    def _tool(self, argv: Sequence[str]) -> Result:
        self.calls[argv[0]] += 1
        return self._run(argv, self._timeout)

    def _query(self, argv: Sequence[str]) -> Result:
        res = self._tool(argv)
        if res.returncode != 0:
            # A query that did not answer leaves us without information: never a state (R3).
            raise SchedulerUnreachable(NAME, f"{argv[0]} failed (exit {res.returncode}): "
                                       f"{res.words or 'no words'}")
        return res

    def squeue(self) -> tuple[SqueueJob, ...]:
        if self._queries == "compact":
            res = self._query(squeue_argv(self._user))
            try:
                return parse_squeue_compact(res.stdout)
            except SlurmOutputError as err:
                raise SchedulerUnreachable(NAME, f"unreadable answer: {err}") from None
        res = self._query(["squeue", "--json"])
        try:
            return parse_squeue_json(res.stdout).jobs
        except SlurmQueryError as err:  # 22.05 exits 0 with an "errors" list when it cannot
            raise SchedulerUnreachable(NAME, str(err)) from None  # reach slurmctld
        except SlurmOutputError as err:
            raise SchedulerUnreachable(NAME, f"unreadable answer: {err}") from None

    def node_query(self, names: Iterable[str]) -> dict[str, NodeInfo]:
        """The nodes our jobs hold (compact), or every node (json)."""
        json_mode = self._queries == "json"
        res = self._query(["sinfo", "--json"] if json_mode
                          else scontrol_node_argv(sorted(set(names))))
        try:
            nodes = parse_sinfo_json(res.stdout) if json_mode else parse_scontrol_nodes(res.stdout)
        except (SlurmQueryError, SlurmOutputError) as err:
            raise SchedulerUnreachable(NAME, f"unreadable answer: {err}") from None
        self._nodes = {n.name: n for n in nodes}
        return self._nodes

    def sacct(self, *, refs: Iterable[str] = (), since: datetime | None = None
              ) -> tuple[SacctRow, ...]:
        argv = ["sacct", "-P", "-D", "-o", ",".join(SACCT_FIELDS)]
        if since is not None:
            argv += ["-S", since.astimezone().strftime("%Y-%m-%dT%H:%M:%S"), "-E", "now"]
        else:
            argv += ["-j", ",".join(sorted(set(refs), key=_ref_key))]
        res = self._query(argv)
        try:
            return parse_sacct(res.stdout)
        except SlurmOutputError as err:
            raise SchedulerUnreachable(NAME, f"unreadable answer: {err}") from None

    # ------------------------------------------------------------------ discover

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        now = self._clock()
        tokens = set(tokens)
        refs = set(refs)
        jobs = self.squeue()

        seen: dict[str, SqueueJob] = {}
        tasks_seen: dict[str, dict[str, SqueueJob]] = {}  # array ref -> task id -> its job
        for job in jobs:  # every job of the cluster: keep ours
            if job.array_job_id:
                ref = str(job.array_job_id)
                if ref in refs or (job.comment and job.comment in tokens):
                    self._arrays.add(ref)
                    by_task = tasks_seen.setdefault(ref, {})
                    for task in _tasks_of(job):
                        by_task.setdefault(task, job)
            elif job.ref in refs or (job.comment and job.comment in tokens):
                seen[job.ref] = job
        # Node states matter only for live jobs holding nodes (node loss, segment health):
        # only those nodes are asked for, and only when due (2 slurmctld RPCs on 22.05 and
        # 24.11: REQUEST_NODE_INFO + REQUEST_PARTITION_INFO); otherwise the last read stands.
        held = {n for job in (*seen.values(), *(j for by_task in tasks_seen.values()
                                                for j in by_task.values()))
                if job.nodes and not mapping.is_ended(job.state)
                for n in _node_names(job.nodes)}
        if node_read_due(held, self._nodes, self._nodes_read_at, now, self.node_interval):
            nodes = self.node_query(held)
            self._nodes_read_at = now
        else:
            nodes = {n: self._nodes[n] for n in held if n in self._nodes}
        for ref, job in seen.items():
            if job.comment:
                self._remember(ref, job.comment)
            if job.standard_output:
                self._outputs[ref] = job.standard_output.replace("%j", ref)
        for ref, by_task in tasks_seen.items():
            comment = next((j.comment for j in by_task.values() if j.comment), "")
            if comment:
                self._remember(ref, comment)

        wanted_refs = set(seen) | set(tasks_seen) | refs \
            | {self._ref_of[t] for t in tokens if t in self._ref_of}
        need: set[str] = set()
        for ref in wanted_refs:
            if ref in self._final:
                continue
            if ref in self._arrays:
                if self._array_needs_accounting(ref, tasks_seen.get(ref, {})):
                    need.add(ref)
                continue
            live = seen.get(ref)
            if live is None:
                need.add(ref)  # left squeue (or never seen there): accounting knows how
            elif mapping.is_ended(live.state) or live.state == "COMPLETING":
                need.add(ref)
            elif live.restarts > self._ended_known.get(ref, 0):
                need.add(ref)  # an execution ended since we last asked accounting
        search = {t for t in tokens if t not in self._ref_of and t not in self._absent_tokens}

        if need or search:
            if search:
                rows = self.sacct(since=now - self._token_lookback)
            else:
                rows = self.sacct(refs=need)
            grouped = group_sacct(rows)
            by_array = group_sacct_array_tasks(grouped)
            if search:
                for key, groups in grouped.items():
                    for row, _ in groups:
                        if row.comment in search:
                            found = array_task_of(row.job_id)
                            ref = found[0] if found is not None else key
                            if found is not None:
                                self._arrays.add(ref)
                            self._remember(ref, row.comment)
                            wanted_refs.add(ref)
                            if ref not in self._final:
                                need.add(ref)
                self._absent_tokens |= {t for t in search if t not in self._ref_of}
            for ref in need:
                if ref in by_array:  # an array job id (also the raw id of one of its tasks)
                    self._arrays.add(ref)
                if ref in self._arrays:
                    self._array_groups[ref] = {
                        task: self._own_rows(ref, groups)
                        for task, groups in by_array.get(ref, {}).items()}
                    continue
                groups = self._own_rows(ref, grouped.get(ref, []))
                self._groups[ref] = groups
                self._ended_known[ref] = sum(
                    1 for row, _ in groups
                    if row.start is not None and row.state_word in mapping.EXECUTION_END_WORDS)

        reports = []
        unknown_to_slurm = False
        for ref in sorted(wanted_refs, key=_ref_key):
            report: ObjectReport | None
            if ref in self._final:
                report = self._final[ref]
            elif ref in self._arrays:
                report = self._array_report(ref, tasks_seen.get(ref, {}), nodes, now)
            else:
                report = self._report(ref, seen.get(ref), nodes, now)
            if report is None:
                # In neither squeue nor accounting: silence, never an end (S16). Left out of
                # an incomplete look, so only this job waits; the others go on.
                unknown_to_slurm = True
                continue
            reports.append(report)
        return Discovery(at=now, objects=tuple(reports), complete=not unknown_to_slurm)

    def _array_needs_accounting(self, ref: str, live: dict[str, SqueueJob]) -> bool:
        """sacct is asked about an array when squeue cannot tell how a task ended: a task
        ended (or ends) in squeue, or a task we knew of left squeue, with no cached answer."""
        final = self._task_final.get(ref, {})
        if not live:
            return True
        for task, job in live.items():
            if task not in final and (mapping.is_ended(job.state) or job.state == "COMPLETING"):
                return True
        return any(task not in live and task not in final
                   for task in self._array_tasks.get(ref, ()))

    def _array_report(self, ref: str, live: dict[str, SqueueJob], nodes: dict[str, NodeInfo],
                      now: datetime) -> ObjectReport | None:
        """Each task reported as a job of its own (ref ``<array>_<task>``), then one report
        for the array (mapping.array_report says why one)."""
        groups_by_task = self._array_groups.get(ref, {})
        final = self._task_final.setdefault(ref, {})
        known = self._array_tasks.setdefault(ref, set())
        known |= set(live) | set(groups_by_task) | set(final)
        token = self._token_of.get(ref)
        tasks: list[tuple[str, ObjectReport]] = []
        for task in sorted(known, key=_task_key):
            if task in final:
                tasks.append((task, final[task]))
                continue
            job = live.get(task)
            groups = groups_by_task.get(task, [])
            task_report = self._report(f"{ref}_{task}", job, nodes, now, groups=groups,
                                       token=token, cache=False)
            if task_report is None:  # known of before, in neither squeue nor accounting now
                continue
            if task_report.ended and groups and mapping.is_ended(groups[-1][0].state_word) \
                    and (job is None or mapping._same_execution(groups[-1][0], job)):
                final[task] = task_report  # accounting confirmed this task's end
            tasks.append((task, task_report))
        report = array_report(ref=ref, token=token, tasks=tasks, now=now)
        if report is None:
            return None
        if report.ended and tasks and all(task in final for task, _ in tasks):
            self._final[ref] = report
        return report

    def _remember(self, ref: str, token: str) -> None:
        self._token_of[ref] = token
        current = self._ref_of.get(token)
        if current is None or _ref_key(ref) > _ref_key(current):
            self._ref_of[token] = ref

    def _own_rows(self, ref: str, groups: list[tuple[SacctRow, list[SacctRow]]]
                  ) -> list[tuple[SacctRow, list[SacctRow]]]:
        """Drop rows of an older job with the same id (ids reset): their comment is another
        token. The comment is empty until a job ends, so empty comments are kept."""
        token = self._token_of.get(ref)
        if token is None:
            return groups
        return [(row, steps) for row, steps in groups if not row.comment or row.comment == token]

    def _report(self, ref: str, job: SqueueJob | None, nodes: dict[str, NodeInfo],
                now: datetime, *, groups: list[tuple[SacctRow, list[SacctRow]]] | None = None,
                token: str | None = None, cache: bool = True) -> ObjectReport | None:
        if groups is None:
            groups = self._groups.get(ref, [])
        report = mapping.object_report(
            ref=ref, token=token or self._token_of.get(ref), job=job, groups=groups,
            nodes=nodes, lost_since=self._lost_since.get(ref), now=now,
            was_held=ref in self._held, preempt_mode=self._preempt_mode)
        if report is None:
            return None
        if report.ended and app_errors.wants_error(report):  # the application's own words
            report = app_errors.with_error(report, next(iter(self.logs(ref)), None))
        if ref not in self._arrays:  # the training's latest checkpoint (G3)
            report = progress.with_progress(report, next(iter(self.logs(ref)), None), now)
        if report.lost_since is not None:
            self._lost_since.setdefault(ref, report.lost_since)
        else:
            self._lost_since.pop(ref, None)
        if report.state is State.HELD:
            self._held.add(ref)
        elif report.state is not State.PENDING:
            self._held.discard(ref)
        if cache and report.ended and groups and mapping.is_ended(groups[-1][0].state_word) \
                and (job is None or mapping._same_execution(groups[-1][0], job)):
            self._final[ref] = report  # accounting confirmed the end: never ask again
        return report

    # ------------------------------------------------------------------ acting

    def validate(self, spec: JobSpec) -> None:
        validate_spec(spec)

    def dry_run(self, submission: Submission) -> DryRun:
        script, argv = render(submission, out_dir=self.output_dir)
        return DryRun(backend=NAME, argv=tuple(argv), documents=(("batch script", script),))

    def close(self) -> None:
        """Nothing to release: every call is one tool run."""

    def ready(self) -> None:
        """Whether the cluster answers is the scheduler's business (SchedulerUnreachable at
        submit); nothing to check locally."""

    def admit(self, spec: JobSpec) -> None:
        """sbatch's refusals (a bad partition, a limit) are read at submit: launch-failed with
        its words (``sbatch --test-only`` is not asked: it would cost a tool run a submit)."""

    def submit(self, submission: Submission) -> str:
        script, argv = render(submission, out_dir=self.output_dir)
        path = Path(argv[-1])
        try:
            write_script(path, script)
        except OSError as err:
            raise SubmitRejected(f"cannot write the batch script {path}: {err.strerror}") from None
        res = self._tool(argv)
        if res.returncode != 0:
            if unreachable_words(res.stderr + res.stdout):
                raise SchedulerUnreachable(NAME, f"sbatch: {res.words}")
            raise SubmitRejected(res.words or f"sbatch exited {res.returncode}")
        try:
            job_id = parse_sbatch_parsable(res.stdout).job_id
        except SlurmOutputError as err:
            raise SubmitRejected(str(err)) from None
        self._remember(job_id, submission.token)
        if submission.spec.slurm.get("array") is not None:
            self._arrays.add(job_id)
        self._absent_tokens.discard(submission.token)
        return job_id

    def stop(self, ref: str) -> None:
        ending.stop(self._tool, ref, self._token_of.get(ref))

    def cancel(self, ref: str) -> None:
        ending.signal_end(self._tool, ["scancel", ref])

    def open_gate(self, ref: str) -> None:
        res = self._tool(["scontrol", "release", ref])
        if res.returncode == 0:
            return
        if unreachable_words(res.stderr + res.stdout):
            raise SchedulerUnreachable(NAME, f"scontrol release: {res.words}")
        if any(w in res.words.lower() for w in ALREADY_ENDED_WORDS):
            return
        raise SlurmCommandError(["scontrol", "release", ref], res.words)

    # ------------------------------------------------------------------ extras

    def logs(self, ref: str) -> list[Path]:
        """The job's output file (stdout and stderr together)."""
        if ref in self._arrays:  # one output file per task: <token>.<array>_<task>.out
            return sorted(self.output_dir.glob(f"*.{ref}_*.out"),
                          key=lambda p: _task_key(p.name.rsplit("_", 1)[-1].split(".")[0]))
        known = self._outputs.get(ref)
        if known:
            return [Path(known)]
        matches = sorted(self.output_dir.glob(f"*.{ref}.out"))
        return matches

    def script_for(self, submission: Submission) -> Path:
        return script_path(submission, self.output_dir)

    def node_states(self) -> dict[str, NodeInfo]:
        """Every node as the last node read saw it (for the segment health publisher)."""
        return dict(self._nodes)

    def unhealthy_nodes(self) -> dict[str, NodeInfo]:
        return {n: i for n, i in self._nodes.items() if node_health.node_unhealthy(i)}


def _ref_key(ref: str) -> tuple[int, str]:
    head = ref.split("_", 1)[0].split(".", 1)[0]
    return (int(head) if head.isdigit() else -1, ref)


def _node_names(text: str) -> tuple[str, ...]:
    try:
        return expand_nodelist(text)
    except ValueError:
        return ()  # a node list we cannot expand is kept verbatim in the report, not asked


def _task_key(task: str) -> tuple[int, str]:
    return (int(task) if task.isdigit() else -1, task)


def _tasks_of(job: SqueueJob) -> tuple[str, ...]:
    """The array tasks one squeue entry stands for: its own task, or (the array's record of
    tasks not yet started) every task of its task string."""
    if job.array_task_id is not None:
        return (str(job.array_task_id),)
    try:
        return expand_array_tasks(job.array_task_string)
    except ValueError:
        return (job.array_task_string or job.ref,)  # keep the words rather than guess at ids

