"""``dispatch doctor --backend slurm``: sinfo and sacct answer, accounting is on (dispatch
reads every end from sacct), the partition exists and is up. The parsing is pure."""

from __future__ import annotations

from dispatch.backends.checks import Check, Verdict
from dispatch.backends.slurm.tools import Result, Runner, run_tool
from dispatch.core.model import SchedulerUnreachable

TIMEOUT_S = 20.0
SINFO = ("sinfo", "-h", "-o", "%P|%a")
CONFIG = ("scontrol", "show", "config")
SACCT = ("sacct", "-n", "-X", "-P", "-S", "now-1minutes", "-o", "JobID")
NO_ACCOUNTING = "accounting_storage/none"


def parse_partitions(text: str) -> tuple[dict[str, bool], str | None]:
    """``sinfo -h -o '%P|%a'``: each partition and whether it is up, and the default one
    (sinfo marks it with ``*``). Pure."""
    found: dict[str, bool] = {}
    default = None
    for line in text.splitlines():
        name, sep, avail = line.strip().partition("|")
        if not sep or not name:
            continue
        if name.endswith("*"):
            name = name[:-1]
            default = name
        found[name] = avail.strip() == "up"
    return found, default


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config``'s ``Key = Value`` lines. Pure."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def _ran(runner: Runner, argv: tuple[str, ...]) -> Result | str:
    try:
        return runner(argv, TIMEOUT_S)
    except SchedulerUnreachable as err:
        return err.reason


def accounting_check(config: dict[str, str]) -> Check:
    storage = config.get("AccountingStorageType", "")
    if not storage or storage == NO_ACCOUNTING:
        return Check("accounting", Verdict.PROBLEM,
                     f"AccountingStorageType is {storage or 'not shown'}: sacct keeps no ended "
                     "job, and dispatch reads every job's end from it",
                     "configure slurmdbd (AccountingStorageType=accounting_storage/slurmdbd)")
    return Check("accounting", Verdict.OK, f"on ({storage}), Slurm "
                 f"{config.get('SLURM_VERSION', '?')}, cluster {config.get('ClusterName', '?')}")


def partition_check(partitions: dict[str, bool], default: str | None,
                    wanted: str | None) -> Check:
    name = wanted or default
    if name is None:
        return Check("partition", Verdict.PROBLEM, "no partition named and the cluster has no "
                     "default one", "name one in the spec's slurm: section (partition)")
    if name not in partitions:
        return Check(f"partition {name}", Verdict.PROBLEM,
                     f"no such partition (there are: {', '.join(partitions) or 'none'})",
                     "name one of them")
    if not partitions[name]:
        return Check(f"partition {name}", Verdict.PROBLEM, "exists but is not up: jobs stay "
                     "pending", "ask the cluster's admin (scontrol update PartitionName=...)")
    return Check(f"partition {name}", Verdict.OK,
                 "up" + (" (the default)" if name == default and wanted is None else ""))


def doctor(partition: str | None = None, runner: Runner = run_tool) -> list[Check]:
    checks: list[Check] = []
    sinfo = _ran(runner, SINFO)
    if isinstance(sinfo, str) or sinfo.returncode != 0:
        words = sinfo if isinstance(sinfo, str) else sinfo.words
        return [Check("sinfo", Verdict.PROBLEM, f"no answer: {words}",
                      "put Slurm's tools on PATH; check slurmctld is up and reachable")]
    partitions, default = parse_partitions(sinfo.stdout)
    checks.append(Check("sinfo", Verdict.OK, f"answers ({len(partitions)} partitions)"))
    sacct = _ran(runner, SACCT)
    if isinstance(sacct, str) or sacct.returncode != 0:
        words = sacct if isinstance(sacct, str) else sacct.words
        checks.append(Check("sacct", Verdict.PROBLEM, f"no answer: {words}",
                            "check slurmdbd is up and reachable"))
    else:
        checks.append(Check("sacct", Verdict.OK, "answers"))
    config = _ran(runner, CONFIG)
    if isinstance(config, str) or config.returncode != 0:
        words = config if isinstance(config, str) else config.words
        checks.append(Check("accounting", Verdict.PROBLEM, f"scontrol show config: {words}"))
    else:
        checks.append(accounting_check(parse_config(config.stdout)))
    checks.append(partition_check(partitions, default, partition))
    return checks
