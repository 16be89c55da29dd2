"""`dispatch segment check` for sbatch scripts: exit 0 proceed, 1 excluded, one line why."""

from __future__ import annotations

import click
from click.testing import CliRunner

from dispatch.segment_health.cli import segment

ARRAY = {
    "SLURM_PROCID": "0",
    "SLURM_JOB_ID": "130",
    "SLURM_ARRAY_JOB_ID": "123",
    "SLURM_ARRAY_TASK_ID": "7",
}
CLEAN = {
    "SLURM_PROCID": None,
    "SLURM_JOB_ID": None,
    "SLURM_ARRAY_JOB_ID": None,
    "SLURM_ARRAY_TASK_ID": None,
    "DISPATCH_SEGMENT_DIR": None,
}


def invoke(args, env):
    runner = CliRunner()
    return runner.invoke(segment, args, env={**CLEAN, **env}, catch_exceptions=False)


def test_excluded_exits_1_with_one_line(tmp_path):
    (tmp_path / "segment_health_check.123.7").write_text('{"why": "n3 drained"}')
    result = invoke(["check", "--dir", str(tmp_path)], ARRAY)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and "task_id=7 is excluded" in lines[0]
    installed = f"Segment health check installed directory={tmp_path} job_id=123 task_id=7"
    assert result.stderr.splitlines() == [f"INFO {installed}"]


def test_missing_decision_exits_0(tmp_path):
    result = invoke(["check", "--dir", str(tmp_path)], ARRAY)
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        f"proceed: no decision file at {tmp_path}/segment_health_check.123.7"
    ]


def test_directory_from_the_environment(tmp_path):
    (tmp_path / "segment_health_check.130.130").write_text("x")
    env = {"SLURM_PROCID": "0", "SLURM_JOB_ID": "130", "DISPATCH_SEGMENT_DIR": str(tmp_path)}
    result = invoke(["check"], env)
    assert result.exit_code == 1 and "job_id=130 task_id=130 is excluded" in result.stdout


def test_fail_open_exits_0_with_a_warning(tmp_path):
    (tmp_path / "segment_health_check.123.7").mkdir()
    result = invoke(["check", "--dir", str(tmp_path)], ARRAY)
    assert result.exit_code == 0
    assert result.stdout.startswith("proceed (fail open): not a regular file (directory)")
    assert any(line.startswith("WARNING ") for line in result.stderr.splitlines())


def test_not_process_0_exits_0_without_looking(tmp_path):
    (tmp_path / "segment_health_check.123.7").write_text("x")
    result = invoke(["check", "--dir", str(tmp_path)], {**ARRAY, "SLURM_PROCID": "1"})
    assert result.exit_code == 0
    assert "not process 0" in result.stdout and result.stderr == ""


def test_no_directory_disables_the_check():
    result = invoke(["check"], ARRAY)
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "segment health check not installed: no segment health directory configured"
    ]


def test_a_relative_directory_is_a_usage_error(tmp_path):
    result = invoke(["check", "--dir", "relative/dir"], ARRAY)
    assert result.exit_code == 2
    assert "absolute path" in result.stderr and "'relative/dir'" in result.stderr


def test_the_group_takes_more_subcommands():
    # The lead mounts `segment` into the main CLI and adds mark / clear / list to it.
    assert isinstance(segment, click.Group) and "check" in segment.commands

    @click.command("probe")
    def probe() -> None:
        click.echo("probe ran")

    segment.add_command(probe)
    try:
        assert invoke(["probe"], {}).stdout == "probe ran\n"
    finally:
        segment.commands.pop("probe")
