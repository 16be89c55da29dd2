"""Issue 24: a typo gets its fix. "Did you mean" for commands, cause names, actions,
backends and spec keys; an invalid word lists the valid ones; every problem of a spec is
reported at once, each with its place (typed: SpecProblems / PolicyError)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.cli.conftest import invoke
from tests.specs import parse_spec

from dispatch.core.model import CauseKind
from dispatch.core.policy import Action
from dispatch.core.spec import SpecError, SpecProblems


def test_a_mistyped_command_gets_the_closest_and_the_list(env: dict[str, str]) -> None:
    code, _, err = invoke(env, "lst")
    assert code == 2
    assert "No such command 'lst'. Did you mean 'ls'" in err
    assert "Commands: cancel, doctor, give-up, goodput, history, kubeflow, local, logs, ls," in err
    code, out, _ = invoke(env, "histroy", "x", "--json")
    assert code == 2 and "Did you mean 'history'?" in json.loads(out)["error"]["message"]


def test_every_problem_of_a_spec_at_once_with_fixes(env: dict[str, str],
                                                   tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text('name: x\ncommand: ["true"]\nnodez: 2\nbackend: lokal\n'
                    "policy:\n  rules:\n    - on: [preemted]\n      action: resubmt\n"
                    "      budget: 1\n")
    code, _, err = invoke(env, "submit", str(spec))
    assert code == 2
    assert f"{spec}: 4 problems:" in err
    assert "  nodez: unknown key (did you mean 'nodes'?)" in err
    assert "  backend: unknown backend 'lokal' (did you mean 'local'?)" in err
    cause = next(x for x in err.splitlines() if x.startswith("  policy.rules[0].on[0]: "))
    assert "Invalid enum value 'preemted' (did you mean 'preempted'" in cause
    assert "valid values: " + ", ".join(k.value for k in CauseKind) in cause
    action = next(x for x in err.splitlines() if x.startswith("  policy.rules[0].action: "))
    assert "(did you mean 'resubmit'?)" in action
    assert "valid values: " + ", ".join(a.value for a in Action) in action
    assert "Traceback" not in err
    assert not (tmp_path / "record.sqlite3").exists() or \
        invoke(env, "ls", "--all", "--json")[1].strip() == "[]"


def test_policy_check_names_valid_values(env: dict[str, str], tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - on: [preemted, node-lots]\n    action: resubmit\n"
                      "    budget: 1\n")
    code, _, err = invoke(env, "policy", "check", str(policy))
    assert code == 2
    assert "rules[0].on[0]: Invalid enum value 'preemted' (did you mean 'preempted'" in err
    assert "valid values: none, preempted, node-lost" in err


def test_every_bad_cause_of_a_rule_is_named_and_oom_gets_its_word(
        env: dict[str, str], tmp_path: Path) -> None:
    """Issue 48 item 10: a rule's `on` with several bad causes names each of them, and the
    words people write for a cause (`oom`, `timeout`) get the cause they mean."""
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - on: [oom, preempted, bogus, timeout]\n"
                      "    action: resubmit\n    budget: 1\n")
    code, _, err = invoke(env, "policy", "check", str(policy))
    assert code == 2, err
    said = {x.split(":")[0].strip(): x for x in err.splitlines() if ": Invalid enum" in x}
    assert list(said) == ["rules[0].on[0]", "rules[0].on[2]", "rules[0].on[3]"], err
    assert "'oom' (did you mean 'out-of-memory'?)" in said["rules[0].on[0]"]
    assert "'bogus'; valid values: none, preempted" in said["rules[0].on[2]"]
    assert "'timeout' (did you mean 'time-limit'?)" in said["rules[0].on[3]"]
    assert "Traceback" not in err


def test_spec_problems_is_a_typed_error_listing_each_place() -> None:
    with pytest.raises(SpecProblems) as err:
        parse_spec({"name": "", "command": "python train.py", "nodes": "2", "gpus": 1},
                   "job.yaml")
    assert isinstance(err.value, SpecError)
    places = [p.split(":")[0] for p in err.value.problems]
    assert places == ["gpus", "command", "nodes", "name"]
    assert str(err.value).startswith("job.yaml: 4 problems:\n  gpus: unknown key")
    # One problem stays the one SpecError it always was.
    with pytest.raises(SpecError) as one:
        parse_spec({"name": "x", "command": ["true"], "nodes": 0}, "job.yaml")
    assert not isinstance(one.value, SpecProblems)
    assert str(one.value) == "job.yaml: nodes: must be 1..100000, got 0"


@pytest.mark.parametrize("command", [["status"], ["ls"], ["watch"], ["history"], ["logs"],
                                     ["supervisors"], ["segment", "list"],
                                     ["policy", "check"]])
def test_every_read_command_takes_json(env: dict[str, str], command: list[str]) -> None:
    code, out, _ = invoke(env, *command, "--help")
    assert code == 0 and "--json" in out


def test_utc_is_per_invocation(env: dict[str, str], tmp_path: Path) -> None:
    """--utc in one invocation leaves the next (same process) in local time."""
    from datetime import UTC, datetime

    from dispatch.cli import render

    at = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)
    invoke(env, "--utc", "ls")
    assert render.when(at).endswith(" UTC")
    invoke(env, "ls")
    assert not render.when(at).endswith(" UTC")


def test_a_mistyped_job_name_gets_the_closest_names(env: dict[str, str],
                                                   tmp_path: Path) -> None:
    for name in ("training-nan", "training-ok"):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(f'name: {name}\nbackend: local\ncommand: ["true"]\n')
        code, _, err = invoke(env, "submit", str(spec))
        assert code == 0, err
    code, _, err = invoke(env, "status", "trainng-nan")
    assert code == 3
    assert "no such job: trainng-nan (did you mean 'training-nan'" in err, err
    code, out, _ = invoke(env, "cancel", "training-nam", "--json")
    assert code == 3
    assert "did you mean 'training-nan'" in json.loads(out)["error"]["message"]
    code, _, err = invoke(env, "history", "resnet-sweep")
    assert code == 3 and "did you mean" not in err  # nothing close: no guess
