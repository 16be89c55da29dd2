"""The batch script and the sbatch argv for one submission. Pure: no I/O.

The script is a file handed to sbatch; the user's argv is quoted word by word with
``shlex.quote`` inside it and run with ``srun --kill-on-bad-exit=1`` (one task per node, the
launch shape the NVRx segment health check needs, H3; ``slurm.ntasks_per_node`` tasks per
node otherwise, which share their node's error and progress files: the first failing task's
error is the one kept). Nothing is ever passed to a shell as a
string built from user input: sbatch gets an argv list.

Spec ``slurm:`` section (every key checked; unknown keys refused):

    partition: low            # --partition
    exclusive: true           # --exclusive
    account / qos / reservation / constraint / nodelist / exclude: <text>
    cpus_per_task / gpus_per_node: <int>
    ntasks_per_node: 2        # tasks (processes) per node, each started by srun (default 1)
    srun_args: ["--cpu-bind=none"]  # more srun options (long options; not those dispatch sets)
    output_dir: /shared/logs  # where the script and its output file go
    extra: ["--mail-type=END"]   # more sbatch options, from a whitelist (SBATCH_EXTRA_OPTIONS)
    array: "0-1"              # a job array (--array): 0-3, 1,3,5, 0-7:2, 0-15%4
    # with segment_health.launcher torchrun or ft_launcher (the launch shape, H3):
    nproc_per_node: 8         # processes per node (default: gpus_per_node, else 1)
    rdzv_host: 10.0.0.5       # rendezvous host (default: the first node of each allocation)
    rdzv_port: 29500          # rendezvous port; plus the task id for an array with rdzv_host

A submission after a segment-health exclusion carries the excluded nodes
(``Submission.exclude_nodes``): they join the spec's own ``exclude`` in one ``--exclude``.

The submission token goes in ``--comment`` (discovery finds the object by it after a crash);
a gated submission gets ``--hold``; ``--no-requeue`` unless the plan has a requeue rule the
backend enforces (then ``--requeue``). An array is always ``--no-requeue`` (seed 002: the
initial artifact lifecycle assumes it; and one array is one object whose tasks each run
once, see mapping.array_report), so a plan that asks Slurm to requeue it is refused.

With ``segment_health.launcher`` torchrun or ft_launcher the script is the launch shape of
``dispatch.segment_health.launch``: one launcher per node under ``srun --kill-on-bad-exit=1``,
ft_launcher given ``--ft-segment-health-check-dir``, torchrun given the
``dispatch-segment-c10d`` rendezvous backend and the directory. ``command`` is then the
training program and its arguments (``[train.py, --lr, "0.1"]``), or the launcher followed
by its own options and the program (``[torchrun, --max-restarts=1, train.py]``); options
dispatch sets itself (the rendezvous, the node and process counts, the directory) are
refused there. Each array task is its own Slurm job with its own rendezvous
(``$SLURM_JOB_ID``); with a fixed ``rdzv_host`` the tasks of an array share that host, so
task N listens on ``rdzv_port + N``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from dispatch.backends.base import Submission
from dispatch.backends.slurm.parse import expand_array_tasks
from dispatch.core.policy import Action, Enforcer
from dispatch.core.spec import JobSpec, SpecError
from dispatch.segment_health.launch import (
    Launcher,
    LaunchRequest,
    LaunchShape,
    LaunchShapeError,
    launch_shape,
)
from dispatch.support.paths import env_path, state_home

# Options a spec may add through ``slurm.extra``. Everything dispatch itself sets (comment,
# hold, requeue, output, job name, nodes, time, memory, partition, array, wrap, parsable) is
# deliberately absent: a spec cannot override the token or the gate.
SBATCH_EXTRA_OPTIONS = frozenset({
    "account", "qos", "reservation", "constraint", "nodelist", "exclude", "gres",
    "gpus-per-node", "gpus", "cpus-per-task", "cpus-per-gpu", "mem-per-cpu", "mem-per-gpu",
    "mail-type", "mail-user", "begin", "dependency", "licenses", "signal", "mincpus", "tmp",
    "wckey", "nice", "priority", "switches", "network", "distribution", "hint", "gpu-bind",
    "cpu-freq", "core-spec", "thread-spec", "export", "propagate", "no-kill", "kill-on-invalid-dep",
    "open-mode", "spread-job", "use-min-nodes", "contiguous", "overcommit", "oversubscribe",
    "sockets-per-node", "cores-per-socket", "threads-per-core", "ntasks-per-core",
    "gpus-per-task", "exclusive",
})
_TEXT_KEYS = ("account", "qos", "reservation", "constraint", "nodelist", "exclude")
_INT_KEYS = ("cpus_per_task", "gpus_per_node")
_LAUNCH_KEYS = ("nproc_per_node", "rdzv_host", "rdzv_port")  # only with a launcher
SLURM_KEYS = frozenset({"partition", "exclusive", "output_dir", "extra", "array",
                        "ntasks_per_node", "srun_args", *_TEXT_KEYS, *_INT_KEYS,
                        *_LAUNCH_KEYS})
# srun options dispatch sets itself (the launch: how many tasks where, how a failure ends
# the step, where the output goes): ``srun_args`` may not set them again.
_SRUN_OWN = frozenset({"kill-on-bad-exit", "nodes", "ntasks-per-node", "ntasks", "output",
                       "error", "input", "jobid", "overlap", "pty", "export"})
# Whole values only (fullmatch): ``re.match(r"^...$")`` takes a value ending in "\n", as
# "$" matches before a final newline, and the line would end early in the batch script.
# Slurm's --array grammar (ASCII digits: \d takes any): indexes, ranges with an optional
# step, an optional %throttle.
_ARRAY = re.compile(r"\d+(-\d+(:\d+)?)?(,\d+(-\d+(:\d+)?)?)*(%\d+)?", re.ASCII)
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")
# Launcher options the launch shape sets: a command may not set them again (a later
# --rdzv-backend would silently drop the segment health check).
_SHAPE_OPTIONS = {
    Launcher.TORCHRUN: ("--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint",
                        "--rdzv-id", "--rdzv_id", "--nnodes", "--nproc-per-node",
                        "--nproc_per_node", "--standalone"),
    Launcher.FT_LAUNCHER: ("--ft-segment-health-check-dir", "--ft_segment_health_check_dir",
                           "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint",
                           "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--nnodes",
                           "--nproc-per-node", "--nproc_per_node", "--standalone"),
}
_OPTION = re.compile(r"--([a-z][a-z0-9-]*)(?:=(.+))?", re.DOTALL)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SAFE_TEXT = re.compile(r"[^\x00\n\r]+")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

DEFAULT_OUTPUT_DIR_ENV = "DISPATCH_SLURM_OUTPUT_DIR"


def default_output_dir() -> Path:
    """$DISPATCH_SLURM_OUTPUT_DIR (absolute, else ``RelativePath``), else <state home>/slurm."""
    return env_path(DEFAULT_OUTPUT_DIR_ENV) or state_home() / "slurm"


def _bad(key: str, message: str) -> SpecError:
    return SpecError("<spec>", f"slurm.{key}" if key else "slurm", message)


def _text(section: dict[str, Any], key: str) -> str | None:
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not _SAFE_TEXT.fullmatch(value) or value.startswith("-"):
        raise _bad(key, f"must be a one-line string not starting with '-', got {value!r}")
    return value


def _validate(section: dict[str, Any]) -> None:
    unknown = sorted(str(k) for k in section if k not in SLURM_KEYS)
    if unknown:
        raise _bad(unknown[0], f"unknown key (known keys: {', '.join(sorted(SLURM_KEYS))})")
    if "exclusive" in section and not isinstance(section["exclusive"], bool):
        raise _bad("exclusive", f"must be true or false, got {section['exclusive']!r}")
    for key in _INT_KEYS:
        value = section.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 1):
            raise _bad(key, f"must be a positive integer, got {value!r}")
    for key in (*_TEXT_KEYS, "partition"):
        _text(section, key)
    out = section.get("output_dir")
    if out is not None and (not isinstance(out, str) or not out.startswith("/")
                            or not _SAFE_TEXT.fullmatch(out)):
        raise _bad("output_dir", f"must be an absolute path, got {out!r}")
    array = section.get("array")
    if array is not None:
        if not isinstance(array, str) or not _ARRAY.fullmatch(array):
            raise _bad("array", f"must be a Slurm array string like \"0-3\", \"1,3,5\", "
                       f"\"0-7:2\" or \"0-15%4\" (quoted), got {array!r}")
        try:
            expand_array_tasks(array)
        except ValueError as err:
            raise _bad("array", str(err)) from None
    tasks = section.get("ntasks_per_node")
    if tasks is not None and (not isinstance(tasks, int) or isinstance(tasks, bool)
                              or tasks < 1):
        raise _bad("ntasks_per_node", f"must be a positive integer, got {tasks!r}")
    _validate_srun_args(section.get("srun_args", []))
    if "nproc_per_node" in section:
        value = section["nproc_per_node"]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _bad("nproc_per_node", f"must be a positive integer, got {value!r}")
    if "rdzv_port" in section:
        value = section["rdzv_port"]
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
            raise _bad("rdzv_port", f"must be a port number 1..65535, got {value!r}")
    if "rdzv_host" in section:
        value = section["rdzv_host"]
        if not isinstance(value, str) or not _HOST.fullmatch(value):
            raise _bad("rdzv_host", f"must be a host name or IPv4 address, got {value!r}")
    extra = section.get("extra", [])
    if not isinstance(extra, list):
        raise _bad("extra", "must be a list of sbatch options like --mail-type=END")
    for i, opt in enumerate(extra):
        if not isinstance(opt, str):
            raise _bad(f"extra[{i}]", f"must be a string, got {opt!r}")
        m = _OPTION.fullmatch(opt)
        if not m or (m.group(2) is not None and not _SAFE_TEXT.fullmatch(m.group(2))):
            raise _bad(f"extra[{i}]", f"not an sbatch long option (--name or --name=value): "
                       f"{opt!r}")
        if m.group(1) not in SBATCH_EXTRA_OPTIONS:
            raise _bad(f"extra[{i}]", f"--{m.group(1)} is not allowed here (allowed: "
                       f"{', '.join(sorted(SBATCH_EXTRA_OPTIONS))})")


def _validate_srun_args(args: Any) -> None:
    if not isinstance(args, list):
        raise _bad("srun_args", "must be a list of srun options like --cpu-bind=none")
    for i, opt in enumerate(args):
        m = _OPTION.fullmatch(opt) if isinstance(opt, str) else None
        if not m or (m.group(2) is not None and not _SAFE_TEXT.fullmatch(m.group(2))):
            raise _bad(f"srun_args[{i}]", f"not an srun long option (--name or --name=value): "
                       f"{opt!r}")
        if m.group(1) in _SRUN_OWN:
            raise _bad(f"srun_args[{i}]", f"--{m.group(1)} is set by dispatch's srun line")


def tasks_per_node(submission: Submission) -> int:
    value = submission.spec.slurm.get("ntasks_per_node")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def wants_requeue(submission: Submission) -> bool:
    """True when the plan has a requeue rule the backend enforces: Slurm requeues natively."""
    return any(rule.action is Action.REQUEUE and rule.enforced_by is Enforcer.BACKEND
               for rule in submission.spec.policy.rules)


def output_dir(submission: Submission, default: Path | None = None) -> Path:
    out = submission.spec.slurm.get("output_dir")
    if isinstance(out, str) and out:
        return Path(out)
    return default if default is not None else default_output_dir()


def script_path(submission: Submission, out_dir: Path) -> Path:
    return out_dir / f"{_safe_name(submission.token)}.sbatch"


def output_pattern(submission: Submission, out_dir: Path) -> Path:
    """The job's output file, ``%j`` expanded by Slurm to the job id; for an array one per
    task, ``%A_%a`` (array job id, task id)."""
    ids = "%A_%a" if is_array(submission) else "%j"
    return out_dir / f"{_safe_name(submission.token)}.{ids}.out"


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def time_option(seconds: int) -> str:
    """Slurm time limits are whole minutes: round up, never down."""
    return str(max(1, -(-seconds // 60)))  # integer ceiling: no float rounding


def memory_option(size: int) -> str:
    """--mem is per node, in MiB here: round up."""
    return f"{max(1, -(-size // (1024 * 1024)))}M"  # integer ceiling


def is_array(submission: Submission) -> bool:
    return submission.spec.slurm.get("array") is not None


def _validate_submission(submission: Submission) -> None:
    """The slurm section, and what it must agree with elsewhere in the spec."""
    spec = submission.spec
    section = dict(spec.slurm)
    _validate(section)
    if is_array(submission) and wants_requeue(submission):
        raise _bad("array", "an array is submitted with --no-requeue (seed 002), but the "
                   "policy has a requeue rule for Slurm to carry out; use resubmit instead")
    if launcher_of(submission) is None:
        for key in _LAUNCH_KEYS:
            if key in section:
                raise _bad(key, "only with segment_health.launcher torchrun or ft_launcher")
    else:
        for key in ("ntasks_per_node", "srun_args"):
            if section.get(key) not in (None, 1, []):
                raise _bad(key, "not with segment_health.launcher: the launch shape starts "
                           "one launcher per node (use slurm.nproc_per_node)")


def validate_spec(spec: JobSpec) -> None:
    """Everything render would refuse, refused before anything is recorded: the slurm section,
    the launch shape, the name, the environment names."""
    render(Submission(job_id="0", number=1, token="0.1", spec=spec), out_dir=Path("/"))


def launcher_of(submission: Submission) -> Launcher | None:
    sh = submission.spec.segment_health
    if sh is None or sh.launcher not in {m.value for m in Launcher}:
        return None
    return Launcher(sh.launcher)


def launch_request(submission: Submission) -> LaunchRequest | None:
    """The launch shape asked for by ``segment_health.launcher`` (None: the command as is)."""
    launcher = launcher_of(submission)
    sh = submission.spec.segment_health
    if launcher is None or sh is None:
        return None
    spec = submission.spec
    section = spec.slurm
    command = tuple(spec.command)
    executable = None
    if Path(command[0]).name == launcher.value:  # the command names its launcher
        executable, command = command[0], command[1:]
        if not command:
            raise SpecError("<spec>", "command", f"names {launcher.value} but no program")
        for word in command:
            if word.split("=", 1)[0] in _SHAPE_OPTIONS[launcher]:
                raise SpecError("<spec>", "command", f"{word.split('=', 1)[0]} is set by "
                                "dispatch's launch shape (segment_health, slurm.rdzv_*)")
    host = section.get("rdzv_host")
    array = is_array(submission)
    return LaunchRequest(
        launcher=launcher, nodes=spec.nodes,
        nproc_per_node=section.get("nproc_per_node") or section.get("gpus_per_node") or 1,
        decision_dir=sh.dir, program=command, array=array,
        rdzv_port=section.get("rdzv_port", 29500), rdzv_host=host,
        port_per_array_task=array and host is not None, launcher_executable=executable)


def shape_of(submission: Submission) -> LaunchShape | None:
    request = launch_request(submission)
    if request is None:
        return None
    try:
        return launch_shape(request)
    except LaunchShapeError as err:
        raise SpecError("<spec>", "segment_health", str(err)) from None


def render_script(submission: Submission, error_prefix: str | None = None) -> str:
    spec = submission.spec
    lines = [
        "#!/bin/bash",
        f"# dispatch: job {submission.job_id}, submission {submission.number}, "
        f"token {submission.token}",
        "# Generated by dispatch. Every word of the command is quoted with shlex.quote.",
        "set -u",
    ]
    for key, value in sorted(spec.env.items()):
        if not _ENV_NAME.fullmatch(key):
            raise SpecError("<spec>", f"env.{key}", "not a valid environment variable name")
        lines.append(f"export {key}={shlex.quote(value)}")
    # The same names the local backend sets, so a command can tell its submission apart.
    lines.append(f"export DISPATCH_JOB_ID={shlex.quote(submission.job_id)}")
    lines.append(f"export DISPATCH_SUBMISSION={submission.number}")
    # The object's ref: an array's tasks all belong to the array job.
    lines.append('export DISPATCH_OBJECT="${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-}}"')
    if spec.segment_health is not None:
        lines.append(f"export DISPATCH_SEGMENT_HEALTH_DIR={shlex.quote(spec.segment_health.dir)}")
    shape = shape_of(submission)
    if shape is not None:  # the launch shape (H3): literals quoted, preamble from constants
        lines += [f"export {name}={shlex.quote(value)}" for name, value in shape.environment]
        lines += shape.preamble
        # The shape's launcher is the first word after srun's options (never an option).
        at = next(i for i, w in enumerate(shape.srun_argv) if i > 0 and not w.startswith("-"))
        lines.append("exec " + shlex.join(with_error_file(shape.srun_argv, error_prefix, at,
                                                          array=is_array(submission))))
        return "\n".join(lines) + "\n"
    srun = ["srun", "--kill-on-bad-exit=1", f"--nodes={spec.nodes}",
            f"--ntasks-per-node={tasks_per_node(submission)}",
            *spec.slurm.get("srun_args", [])]
    lines.append("exec " + shlex.join(with_error_file((*srun, *spec.command), error_prefix,
                                                      len(srun), array=is_array(submission))))
    return "\n".join(lines) + "\n"


# Each node's task sets TORCHELASTIC_ERROR_FILE and DISPATCH_PROGRESS_FILE (G3) to files of
# dispatch's own before it runs the command: one per job, execution (SLURM_RESTART_COUNT) and
# node (SLURM_NODEID), named from the prefix given as $0. A constant script: the command's
# words are its arguments, never part of it.
NODE_ERROR_FILE = ('n="$0.${SLURM_JOB_ID}.r${SLURM_RESTART_COUNT:-0}.node${SLURM_NODEID}"; '
                   'export TORCHELASTIC_ERROR_FILE="$n.error.json" '
                   'DISPATCH_PROGRESS_FILE="$n.progress.jsonl"; unset n; exec "$@"')
# An array's tasks share the script, so the task's own files are named on the node from
# Slurm's SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID, like its output file
# (``<token>.%A_%a.out``): ``PREFIX.<array>_<task>.r0.node<id>.error.json``. Still a constant
# line.
ARRAY_TASK_ERROR_FILE = ('n="$0.${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}'
                         '.r${SLURM_RESTART_COUNT:-0}.node${SLURM_NODEID}"; '
                         'export TORCHELASTIC_ERROR_FILE="$n.error.json" '
                         'DISPATCH_PROGRESS_FILE="$n.progress.jsonl"; unset n; exec "$@"')


def with_error_file(srun_argv: tuple[str, ...], prefix: str | None,
                    at: int, *, array: bool = False) -> tuple[str, ...]:
    """``srun OPTIONS sh -c NODE_ERROR_FILE PREFIX COMMAND...`` (ARRAY_TASK_ERROR_FILE for an
    array), the wrapper put at ``at`` (after srun's options); ``srun_argv`` unchanged without
    a prefix."""
    if prefix is None:
        return srun_argv
    line = ARRAY_TASK_ERROR_FILE if array else NODE_ERROR_FILE
    return (*srun_argv[:at], "/bin/sh", "-c", line, prefix, *srun_argv[at:])


def error_file_prefix(submission: Submission, out_dir: Path) -> str:
    """Where the nodes' error files go: beside the output file, named by the token."""
    return str(out_dir / _safe_name(submission.token))


def sbatch_argv(submission: Submission, *, script: Path, out_dir: Path,
                requeue: bool | None = None) -> list[str]:
    spec = submission.spec
    section = dict(spec.slurm)
    _validate_submission(submission)
    if not _SAFE_TEXT.fullmatch(spec.name):
        raise SpecError("<spec>", "name", "must be one line")
    if requeue is None:
        requeue = wants_requeue(submission)
    argv = ["sbatch", "--parsable", f"--job-name={spec.name}", f"--comment={submission.token}",
            f"--output={output_pattern(submission, out_dir)}", f"--nodes={spec.nodes}",
            f"--ntasks-per-node={tasks_per_node(submission)}"]
    if spec.workdir:
        argv.append(f"--chdir={spec.workdir}")
    if spec.time_limit is not None:
        argv.append(f"--time={time_option(spec.time_limit)}")
    if spec.memory is not None:
        argv.append(f"--mem={memory_option(spec.memory)}")
    partition = _text(section, "partition")
    if partition:
        argv.append(f"--partition={partition}")
    if section.get("exclusive"):
        argv.append("--exclusive")
    for key in _TEXT_KEYS:
        value = _text(section, key)
        if value and key != "exclude":
            argv.append(f"--{key}={value}")
    for key in _INT_KEYS:
        if section.get(key) is not None:
            argv.append(f"--{key.replace('_', '-')}={section[key]}")
    extra = list(section.get("extra", []))
    exclude = exclude_option(submission, [o for o in extra if o.startswith("--exclude=")])
    argv.extend(o for o in extra if not o.startswith("--exclude="))
    if exclude:
        argv.append(exclude)
    if is_array(submission):
        argv.append(f"--array={section['array']}")
        requeue = False  # seed 002; _validate_submission refused a plan that needs it
    shape = shape_of(submission)
    for option in shape.sbatch_options if shape is not None else ():
        if option not in argv and option != "--no-requeue":
            argv.append(option)
    argv.append("--requeue" if requeue else "--no-requeue")
    if submission.gated:
        argv.append("--hold")
    argv.append(str(script))
    return argv


def exclude_option(submission: Submission, extra_excludes: list[str]) -> str | None:
    """One ``--exclude`` (sbatch keeps only the last one given): the spec's ``slurm.exclude``,
    any ``--exclude=`` in ``slurm.extra``, then the nodes of the job's segment-health
    exclusions the submission carries, each node once."""
    user = _text(dict(submission.spec.slurm), "exclude")
    parts = ([user] if user else []) + [o.split("=", 1)[1] for o in extra_excludes]
    for node in submission.exclude_nodes:
        if not _NODE.fullmatch(node):
            raise SpecError("<submission>", "exclude_nodes", f"not a Slurm node name: {node!r}")
    named = {n for p in parts for n in p.split(",")}
    parts += [n for n in submission.exclude_nodes if n not in named]
    return f"--exclude={','.join(dict.fromkeys(parts))}" if parts else None


def render(submission: Submission, *, out_dir: Path | None = None,
           requeue: bool | None = None) -> tuple[str, list[str]]:
    """(batch script text, sbatch argv). The argv's last word is where the script goes."""
    directory = output_dir(submission, out_dir)
    _validate_submission(submission)
    script = render_script(submission, error_file_prefix(submission, directory))
    argv = sbatch_argv(submission, script=script_path(submission, directory), out_dir=directory,
                       requeue=requeue)
    return script, argv


def dry_run(submission: Submission) -> tuple[str, list[str]]:
    """What would reach the scheduler, submitting nothing (TorchX's submit_dryrun)."""
    return render(submission)
