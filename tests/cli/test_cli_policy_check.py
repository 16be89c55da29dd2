"""Issue 2, item 8: `dispatch policy check FILE [--backend] [--json]`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dispatch.cli import main


def check(tmp_path: Path, text: str, *args: str) -> tuple[int, str]:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    result = CliRunner().invoke(main, ["policy", "check", str(path), *args])
    return result.exit_code, result.output


GOOD = """
rules:
  - on: [preempted, node-lost]
    action: resubmit
    budget: 3
  - on: [unknown]
    action: hold
"""


def test_valid_policy_exits_0_and_lists_uncovered(tmp_path: Path) -> None:
    code, out = check(tmp_path, GOOD, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["valid"] is True and data["problems"] == []
    assert "non-zero-exit" in data["uncovered"] and "preempted" not in data["uncovered"]
    assert "none" not in data["uncovered"] and "cancelled" not in data["uncovered"]
    assert data["unenforced"] == []


def test_human_output_names_uncovered_causes(tmp_path: Path) -> None:
    code, out = check(tmp_path, GOOD)
    assert code == 0
    assert "uncovered:" in out and "out-of-memory" in out


def test_every_problem_is_reported_with_exit_2(tmp_path: Path) -> None:
    text = """
rules:
  - on: [preempted, cancelled]
    action: resubmit
    budget: 1
  - on: [preempted, unknown]
    action: resubmit
    budget: 2
  - on: [none]
    action: hold
    budget: 1
"""
    code, out = check(tmp_path, text, "--json")
    assert code == 2
    data = json.loads(out)
    assert data["valid"] is False
    problems = "\n".join(data["problems"])
    assert "cancelled cannot be covered" in problems
    assert "preempted is already covered by rules[0]" in problems
    assert "unknown may only be covered by hold or escalate" in problems
    assert "none cannot be covered" in problems
    assert "budget is meaningless for hold" in problems
    assert len(data["problems"]) >= 5


@pytest.mark.parametrize("text, where", [
    ("rules:\n  - on: [preempted\n", "line"),
    ("rules:\n  - on: [pre-empted]\n    action: resubmit\n    budget: 1\n", "rules[0].on[0]"),
    ("rules:\n  - on: [preempted]\n    action: retry\n    budget: 1\n", "rules[0].action"),
    ("rules:\n  - on: [preempted]\n    action: resubmit\n", "needs a budget"),
    ("rules:\n  - on: [preempted]\n    action: resubmit\n    budget: -1\n", ">= 0"),
    ("rules:\n  - on: [preempted]\n    action: resubmit\n    budget: two\n", "rules[0].budget"),
    ("rules:\n  - on: [preempted]\n    action: resubmit\n    budget: 1\n    colour: red\n",
     "colour"),
    ("rulez: []\n", "rulez"),
])
def test_malformed_files_are_clear_errors_naming_the_place(tmp_path: Path, text: str,
                                                           where: str) -> None:
    code, out = check(tmp_path, text)
    assert code == 2
    assert "Traceback" not in out
    assert "policy.yaml" in out
    assert where in out


def test_backend_declarations_change_what_is_enforced(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    text = "rules:\n  - on: [preempted]\n    action: requeue\n    budget: 2\n"
    _, local = check(tmp_path, text, "--json", "--backend", "local")
    _, slurm = check(tmp_path, text, "--json", "--backend", "slurm")
    assert json.loads(local)["unenforced"] and not json.loads(slurm)["unenforced"]
    restart = "rules:\n  - on: [preempted]\n    action: restart\n    budget: 2\n"
    _, slurm2 = check(tmp_path, restart, "--json", "--backend", "slurm")
    assert json.loads(slurm2)["unenforced"]
    # Kubeflow enforces restart only where the runtime's JobSet failurePolicy does, which
    # the operator declares.
    _, kube = check(tmp_path, restart, "--json", "--backend", "kubeflow")
    assert json.loads(kube)["unenforced"]
    monkeypatch.setenv("DISPATCH_KUBEFLOW_RESTART_NATIVE", "1")
    _, kube_native = check(tmp_path, restart, "--json", "--backend", "kubeflow")
    assert not json.loads(kube_native)["unenforced"]


def test_a_job_spec_is_checked_by_its_policy_section(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\ncommand: [/bin/true]\npolicy:\n  rules:\n    - on: [preempted]\n"
                    "      action: resubmit\n      budget: 1\n")
    result = CliRunner().invoke(main, ["policy", "check", str(spec), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output)["valid"] is True


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["policy", "check", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
