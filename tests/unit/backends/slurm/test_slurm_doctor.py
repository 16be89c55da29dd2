"""`dispatch doctor --backend slurm`'s parsing of real captured output (22.05 testbed:
tests/fixtures/slurm/22.05/doctor.*) and its verdicts, with the tools' answers given."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from dispatch.backends.checks import Verdict
from dispatch.backends.slurm.doctor import (
    CONFIG,
    SACCT,
    SINFO,
    doctor,
    parse_config,
    parse_partitions,
)
from dispatch.backends.slurm.tools import Result
from dispatch.core.model import SchedulerUnreachable

FIX = Path(__file__).parents[3] / "fixtures" / "slurm" / "22.05"
SINFO_OUT = (FIX / "doctor.sinfo.txt").read_text()
CONFIG_OUT = (FIX / "doctor.scontrol-config.txt").read_text()


def test_partitions_and_the_default_from_real_sinfo() -> None:
    assert parse_partitions(SINFO_OUT) == ({"low": True, "high": True, "dev": True}, "low")
    assert parse_partitions("gpu|down\nbatch*|up\n\n") == ({"gpu": False, "batch": True},
                                                           "batch")


def test_accounting_from_real_scontrol_show_config() -> None:
    config = parse_config(CONFIG_OUT)
    assert config["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert config["SLURM_VERSION"].startswith("22.05")
    assert config["ClusterName"] == "dispatch"


def runner(answers: dict[tuple[str, ...], Result | str]):  # type: ignore[no-untyped-def]
    def run(argv: Sequence[str], timeout: float) -> Result:
        a = answers[tuple(argv)]
        if isinstance(a, str):
            raise SchedulerUnreachable("slurm", a)
        return a
    return run


def ok(argv: tuple[str, ...], out: str) -> Result:
    return Result(argv, 0, out, "")


GOOD = {SINFO: ok(SINFO, SINFO_OUT), SACCT: ok(SACCT, ""), CONFIG: ok(CONFIG, CONFIG_OUT)}


@pytest.mark.parametrize(("change", "partition", "problem"), [
    ({}, None, None),
    ({}, "high", None),
    ({}, "gpu", "partition gpu"),
    ({SINFO: ok(SINFO, "low*|down\n")}, None, "partition low"),
    ({CONFIG: ok(CONFIG, CONFIG_OUT.replace("accounting_storage/slurmdbd",
                                            "accounting_storage/none"))}, None, "accounting"),
    ({SACCT: Result(SACCT, 1, "", "sacct: error: Problem talking to the database: "
                    "Connection refused")}, None, "sacct"),
    ({SINFO: "cannot run sinfo: No such file or directory"}, None, "sinfo"),
])
def test_verdicts(change: dict, partition: str | None, problem: str | None) -> None:  # type: ignore[type-arg]
    checks = doctor(partition, runner({**GOOD, **change}))
    problems = [c.name for c in checks if c.verdict is Verdict.PROBLEM]
    assert problems == ([] if problem is None else [problem])
    for c in checks:
        if c.verdict is Verdict.PROBLEM:
            assert c.detail and c.fix
