"""submitit's parameter names onto dispatch's Executor parameters. Pure: no I/O.

submitit's generic names (``timeout_min``, ``mem_gb``, ``nodes``, ``cpus_per_task``,
``gpus_per_node``, ``tasks_per_node``, ``name``, ``stderr_to_stdout``) apply on every
cluster; a name prefixed with a cluster (``slurm_partition``, ``local_...``) applies on that
cluster only and is checked, then ignored, on the others, as submitit does. An unknown name
is refused in submitit's words (a ``NameError``, also a dispatch ``BadInput``) with the
closest valid name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatch.core.suggest import did_you_mean
from dispatch.errors import BadInput

CLUSTERS = ("slurm", "local", "debug")
GENERIC: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "timeout_min": (int,),
    "mem_gb": (int, float),
    "nodes": (int,),
    "cpus_per_task": (int,),
    "gpus_per_node": (int,),
    "tasks_per_node": (int,),
    "stderr_to_stdout": (bool,),
}
# submitit's Slurm parameter and the dispatch Executor parameter it becomes.
SLURM_DIRECT = {
    "partition": "slurm_partition",
    "account": "slurm_account",
    "qos": "slurm_qos",
    "constraint": "slurm_constraint",
    "exclude": "slurm_exclude",
    "nodelist": "slurm_nodelist",
    "exclusive": "slurm_exclusive",
    "array_parallelism": "slurm_array_parallelism",
    "job_name": "name",
    "time": "timeout_min",
    "nodes": "nodes",
    "ntasks_per_node": "tasks_per_node",
    "cpus_per_task": "cpus_per_task",
    "gpus_per_node": "gpus_per_node",
    "num_gpus": "gpus_per_node",
    "mem": "memory",
    "additional_parameters": "slurm_additional_parameters",
}
# submitit's Slurm parameters that are sbatch options of the same name (--mem-per-gpu=...).
SLURM_SBATCH = (
    "mem_per_gpu",
    "mem_per_cpu",
    "cpus_per_gpu",
    "gpus_per_task",
    "gres",
    "mail_type",
    "mail_user",
    "dependency",
    "wckey",
)
# Valid in submitit, with a reason dispatch does not take them (any value; use_srun and
# stderr_to_stdout are refused only for the value dispatch cannot honour: see VALUE_REFUSED).
SLURM_REFUSED = {
    "setup": "dispatch runs argv lists, never shell lines: put the setup in the function or "
    "in the job's env (slurm_additional_parameters for sbatch options)",
    "teardown": "dispatch runs argv lists, never shell lines: put the teardown in the function",
    "comment": "dispatch's --comment carries the submission's token (how it finds the job "
    "again after a crash)",
    "signal_delay_s": "dispatch asks for the checkpoint on Slurm's own SIGTERM at the time "
    "limit (KillWait before SIGKILL) and on a preemption (GraceTime): a "
    "signal sent earlier would end the job before its limit, read as a "
    "crash, not a time limit to resubmit",
}
VALUE_REFUSED = {
    ("use_srun", False): "dispatch always starts the tasks with srun (its --kill-on-bad-exit "
    "ends the job when one task fails)",
    ("stderr_to_stdout", True): "dispatch keeps each task's stdout and stderr apart "
    "(job.stdout(), job.stderr())",
}
SLURM_OWN = {"max_num_timeout", "max_pickle_size_gb", "python"}
# submitit 1.5.4's SlurmExecutor parameters (_make_sbatch_string's, but command, folder and
# map_count), and the executor's own.
SLURM_VALID = frozenset(
    {
        *SLURM_DIRECT,
        *SLURM_SBATCH,
        *SLURM_REFUSED,
        *SLURM_OWN,
        "stderr_to_stdout",
        "srun_args",
        "use_srun",
    }
)
LOCAL_VALID = frozenset({"setup", "max_num_timeout", "python", "visible_gpus"})
VALID = {"slurm": SLURM_VALID, "local": LOCAL_VALID, "debug": frozenset()}


class UnknownParameter(BadInput, NameError):
    """``update_parameters`` with a name submitit does not know (submitit's ``NameError``)."""


class BadParameter(BadInput, AssertionError):
    """A generic parameter of the wrong type (submitit's ``AssertionError``)."""


class BadParameterValue(BadInput, ValueError):
    """A parameter's value dispatch cannot use (infinite memory, more tasks than a job may
    have): names the submitit parameter as it was given."""


def check_names(parameters: Mapping[str, Any], generic_ok: bool = True) -> None:
    """submitit's checks: generic names have their types; every other name is
    ``<cluster>_<name>`` with a known cluster and a name valid there."""
    invalid: list[str] = []
    for key, value in parameters.items():
        if key in GENERIC:
            wanted = GENERIC[key]
            if value is not None and (
                not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted)
            ):
                raise BadParameter(
                    f'Parameter "{key}" expected type '
                    f"{' or '.join(t.__name__ for t in wanted)} "
                    f'(but value: "{value}")'
                )
            continue
        cluster, _, arg = key.partition("_")
        if not arg:
            invalid.append(
                f"Parameter '{key}' need to be prefixed by an executor name."
                f"{did_you_mean(key, [*GENERIC, *_prefixed()])}"
            )
        elif cluster not in CLUSTERS:
            invalid.append(
                f"Unknown executor '{cluster}' in parameter '{key}'."
                f"{did_you_mean(key, [*GENERIC, *_prefixed()])}"
            )
        elif arg not in VALID[cluster] and arg not in GENERIC:
            invalid.append(
                f"Unknown argument '{arg}' for executor '{cluster}' in parameter "
                f"'{key}'.{did_you_mean(arg, VALID[cluster] | set(GENERIC))}"
                f" Valid arguments: {', '.join(sorted(VALID[cluster]))}"
            )
    if invalid:
        invalid += [
            f"Known executors: {', '.join(CLUSTERS)}",
            f"As a reminder, shared/generic (non-prefixed) parameters are: {', '.join(GENERIC)}.",
        ]
        raise UnknownParameter("\n".join(invalid))


def _prefixed() -> list[str]:
    return [f"{c}_{a}" for c in CLUSTERS for a in VALID[c]]


def for_cluster(parameters: Mapping[str, Any], cluster: str) -> dict[str, Any]:
    """The parameters that apply on ``cluster``, unprefixed: the generic ones, overridden by
    the cluster's own (``slurm_timeout_min`` beats ``timeout_min`` on Slurm)."""
    mine = {k: v for k, v in parameters.items() if k in GENERIC and v is not None}
    for key, value in parameters.items():
        prefix, _, arg = key.partition("_")
        if prefix == cluster and arg and value is not None:
            mine[arg] = value
    return mine


def dispatch_parameters(mine: Mapping[str, Any], cluster: str) -> dict[str, Any]:
    """A cluster's submitit parameters as the dispatch Executor's (``max_num_timeout``,
    ``stderr_to_stdout``, ``python`` and ``max_pickle_size_gb`` are the executor's own and
    are left out). ``BadInput`` names a submitit parameter dispatch does not take, and why."""
    out: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in mine.items():
        if key in SLURM_REFUSED and cluster == "slurm" or key == "setup":
            raise BadInput(
                f"{cluster}_{key}: not taken by dispatch.submitit: "
                f"{SLURM_REFUSED.get(key, SLURM_REFUSED['setup'])}"
            )
        if isinstance(value, bool) and (key, value) in VALUE_REFUSED:
            raise BadInput(
                f"{key}={value}: not taken by dispatch.submitit: {VALUE_REFUSED[key, value]}"
            )
        if key in (
            "max_num_timeout",
            "python",
            "max_pickle_size_gb",
            "visible_gpus",
            "stderr_to_stdout",
            "use_srun",
        ):
            continue
        if key == "srun_args" and cluster == "slurm":
            if isinstance(value, str) or not all(isinstance(a, str) for a in value):
                raise BadInput(f"slurm_srun_args: a list of srun options, got {value!r}")
            out["slurm"] = {**out.get("slurm", {}), "srun_args": list(value)}
            continue
        if key == "exclusive" and isinstance(value, str):  # --exclusive=user, =mcs
            extra[key] = value
            continue
        if cluster != "slurm" and key in ("cpus_per_task", "gpus_per_node"):
            continue  # a Slurm request; the local backend runs on this machine's devices
        if key in SLURM_SBATCH:
            extra[key] = value
            continue
        target = SLURM_DIRECT.get(key, key) if cluster == "slurm" else key
        if key == "mem" and isinstance(value, str):
            value = value.upper() if value[-1:].isalpha() else f"{value}M"
        elif key == "mem" and isinstance(value, int) and not isinstance(value, bool):
            value = f"{value}M"  # sbatch's unit
        out[target] = value
    if extra:
        out["slurm_additional_parameters"] = {
            **dict(out.get("slurm_additional_parameters") or {}),
            **extra,
        }
    return out


PREEMPTION_BUDGET = 1000  # submitit requeues a preempted job any number of times


def recovery_policy(checkpointable: bool, max_num_timeout: int) -> dict[str, Any]:
    """submitit's requeueing as a dispatch policy: a preemption is resubmitted (a callable
    without a checkpoint starts over), a time limit only for a checkpointable callable, at
    most ``max_num_timeout`` times. Every other cause fails the job."""
    rules: list[dict[str, Any]] = [
        {"on": ["preempted"], "action": "resubmit", "budget": PREEMPTION_BUDGET}
    ]
    if checkpointable and max_num_timeout > 0:
        rules.append({"on": ["time-limit"], "action": "resubmit", "budget": max_num_timeout})
    return {"rules": rules}
