"""Job specs and policy files: strict decoding, errors that name the file and the place."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.specs import parse_spec

from dispatch.core.model import CauseKind
from dispatch.core.policy import Action, PolicyError, RecoveryPolicy
from dispatch.core.spec import (
    JobSpec,
    SpecError,
    parse_duration,
    parse_policy,
    parse_size,
)
from dispatch.service.specfile import load_policy, load_spec

ISSUE_POLICY = """\
rules:
  - on: [preempted, node-lost]
    action: resubmit
    budget: 3
  - on: [unknown]
    action: hold
"""


def test_the_issues_policy_file_loads(tmp_path: Path) -> None:
    """The policy file format of issue 2, with its YAML key `on:` (a boolean in YAML 1.1)."""
    path = tmp_path / "policy.yaml"
    path.write_text(ISSUE_POLICY)
    policy = load_policy(path)
    assert [(r.on, r.action, r.budget) for r in policy.rules] == [
        ((CauseKind.PREEMPTED, CauseKind.NODE_LOST), Action.RESUBMIT, 3),
        ((CauseKind.UNKNOWN,), Action.HOLD, None),
    ]


@pytest.mark.parametrize("data, where, words", [
    pytest.param({"rules": [{"on": ["preempted"], "action": "resubmit", "budget": "3"}]},
                 "rules[0].budget", "got `str`", id="budget-str"),
    pytest.param({"rules": [{"on": ["preempted"], "action": "resubmit", "budget": 2.5}]},
                 "rules[0].budget", "got `float`", id="budget-float"),
    pytest.param({"rules": [{"on": ["preempted"], "action": "resubmit", "budget": True}]},
                 "rules[0].budget", "got `bool`", id="budget-bool"),
    pytest.param({"rules": [{"on": ["preempted", "thermal"], "action": "hold"}]},
                 "rules[0].on[1]", "'thermal'", id="unknown-cause"),
    pytest.param({"rules": [{"on": ["NODE_LOST"], "action": "hold"}]},
                 "rules[0].on[0]", "'NODE_LOST'", id="cause-not-by-its-name"),
    pytest.param({"rules": [{"on": ["preempted"], "action": "hold"},
                            {"on": ["time-limit"], "action": "reboot"}]},
                 "rules[1].action", "'reboot'", id="unknown-action"),
    pytest.param({"rules": [{"on": ["preempted"], "action": "hold", "retries": 3}]},
                 "rules[0]", "`retries`", id="unknown-rule-key"),
    pytest.param({"rules": [{"on": ["preempted"], "action": "hold", "enforcer": "god"}]},
                 "rules[0].enforcer", "'god'", id="unknown-enforcer"),
    pytest.param({"rules": {"on": ["preempted"]}}, "rules", "Expected `array`",
                 id="rules-not-a-list"),
    pytest.param({"rules": [{"on": "preempted", "action": "hold"}]}, "rules[0].on",
                 "Expected `array`", id="on-not-a-list"),
    pytest.param({"rules": [{"action": "hold"}]}, "rules[0]", "`on`", id="on-missing"),
    pytest.param([1, 2], "(top)", "mapping", id="not-a-mapping"),
])
def test_malformed_policy_names_the_place(data: object, where: str, words: str) -> None:
    """Issue 2 item 8: a malformed policy (unknown cause or action, budget not an int,
    unknown key) is a clear error naming the file and the place. A bad rule is one of the
    problems listed (every problem, not only the first); a file that is not a policy at all
    is one SpecError."""
    with pytest.raises((SpecError, PolicyError)) as err:
        parse_policy(data, "team/policy.yaml")
    if isinstance(err.value, SpecError):
        assert err.value.source == "team/policy.yaml"
        assert err.value.where == where
        assert words in err.value.message
        assert str(err.value).startswith(f"team/policy.yaml: {where}: ")
    else:
        assert err.value.where == "team/policy.yaml"
        assert any(p.startswith(f"{where}: ") and words in p for p in err.value.problems), \
            err.value.problems


def test_every_malformed_rule_is_reported_not_only_the_first() -> None:
    data = {"rules": [{"on": ["pre-empted"], "action": "resubmit", "budget": 1},
                      {"on": ["node-lost"], "action": "retry", "budget": 1},
                      {"on": ["unknown"], "action": "resubmit", "budget": 1}]}
    with pytest.raises(PolicyError) as err:
        parse_policy(data, "p.yaml")
    assert [p.split(":")[0] for p in err.value.problems] == [
        "rules[0].on[0]", "rules[1].action", "rules[2]"]


def test_unknown_top_level_policy_key_is_named() -> None:
    with pytest.raises(SpecError) as err:
        parse_policy({"rulez": []}, "p.yaml")
    assert "`rulez`" in str(err.value) and str(err.value).startswith("p.yaml")


@pytest.mark.parametrize("rule, problem", [
    ({"on": ["preempted"], "action": "resubmit"}, "rules[0]: resubmit needs a budget"),
    ({"on": ["preempted"], "action": "requeue", "budget": -1},
     "rules[0]: budget must be >= 0, got -1"),
    ({"on": ["preempted"], "action": "hold", "budget": 2},
     "rules[0]: budget is meaningless for hold; remove it"),
    ({"on": ["preempted"], "action": "escalate", "budget": 0},
     "rules[0]: budget is meaningless for escalate; remove it"),
])
def test_budget_missing_negative_or_on_hold_escalate_is_refused(rule: dict, problem: str
                                                                ) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy({"rules": [rule]}, "p.yaml")
    assert err.value.problems == [problem]
    assert err.value.where == "p.yaml"


def test_parse_policy_reports_every_problem_with_its_place() -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy({"rules": [
            {"on": ["preempted", "cancelled"], "action": "resubmit"},
            {"on": ["preempted", "unknown"], "action": "restart", "budget": -1},
            {"on": ["none"], "action": "hold", "budget": 1},
        ]}, "p.yaml")
    assert len(err.value.problems) == 7
    assert [p.split(":")[0] for p in err.value.problems] == [
        "rules[0]", "rules[0]", "rules[1]", "rules[1]", "rules[1]", "rules[2]", "rules[2]"]


def test_an_empty_policy_is_valid() -> None:
    assert parse_policy(None) == RecoveryPolicy()
    assert parse_policy({}) == RecoveryPolicy()
    assert parse_policy({"rules": []}) == RecoveryPolicy()


@pytest.mark.parametrize("text, line", [
    ("rules:\n  - on: [preempted\n    action: hold\n", 3),
    ("rules:\n  - on: [preempted]\n\taction: hold\n", 3),
    ("rules:\n  - on: [preempted]\n    action: hold\n  - {on: [time-limit], action: hold\n", 5),
])
def test_yaml_errors_name_the_file_and_line(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    for load in (load_policy, load_spec):
        with pytest.raises(SpecError) as err:
            load(path)
        assert err.value.source == str(path)
        assert err.value.where.startswith(f"line {line}, column ")
        assert "bad YAML" in err.value.message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        load_policy(tmp_path / "nope.yaml")
    assert str(tmp_path / "nope.yaml") in str(err.value) and "cannot read" in str(err.value)


# --- job specs -----------------------------------------------------------------------------

BASE = {"name": "train", "command": ["python", "train.py"]}


def test_a_full_spec_parses(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: train\ncommand: [python, train.py]\nbackend: slurm\nnodes: 2\n"
        "time_limit: 2h\nmemory: 4G\nenv: {A: b}\n"
        "segment_health: {dir: /var/run/sh, launcher: torchrun}\n"
        "slurm: {partition: gpu}\n"
        "policy:\n" + "".join("  " + line + "\n" for line in ISSUE_POLICY.splitlines()))
    spec = load_spec(path)
    assert isinstance(spec, JobSpec)
    assert (spec.name, spec.command, spec.backend, spec.nodes) == (
        "train", ("python", "train.py"), "slurm", 2)
    assert (spec.time_limit, spec.memory) == (7200, 4 * 1024**3)
    assert spec.env == {"A": "b"} and spec.slurm == {"partition": "gpu"}
    assert spec.segment_health is not None and spec.segment_health.launcher == "torchrun"
    assert spec.policy.rules[0].budget == 3


@pytest.mark.parametrize("extra, where, words", [
    pytest.param({"gpus": 3}, "gpus", "unknown key", id="unknown-key"),
    pytest.param({"command": "python train.py"}, "command", "argv list", id="command-string"),
    pytest.param({"command": []}, "command", "non-empty", id="command-empty"),
    pytest.param({"command": ["python", ""]}, "command", "non-empty", id="command-empty-arg"),
    pytest.param({"name": "  "}, "name", "must not be empty", id="name-blank"),
    pytest.param({"nodes": 0}, "nodes", "1..100000", id="nodes-zero"),
    pytest.param({"nodes": "2"}, "nodes", "got `str`", id="nodes-str"),
    pytest.param({"backend": "pbs"}, "backend", "'pbs'", id="backend-unknown"),
    pytest.param({"time_limit": "2x"}, "time_limit", "not a duration", id="duration-bad"),
    pytest.param({"time_limit": "0s"}, "time_limit", "positive", id="duration-zero"),
    pytest.param({"memory": "lots"}, "memory", "not a size", id="size-bad"),
    pytest.param({"memory": 0}, "memory", "positive", id="size-zero"),
    pytest.param({"backend": "slurm", "segment_health": {"dir": "rel"}},
                 "segment_health.dir", "absolute", id="segment-dir-relative"),
    pytest.param({"backend": "slurm", "segment_health": {"dir": "/x", "launcher": "mpirun"}},
                 "segment_health.launcher", "ft_launcher", id="segment-launcher"),
    pytest.param({"backend": "local", "segment_health": {"dir": "/x"}},
                 "segment_health", "only the slurm backend", id="segment-not-on-slurm"),
    pytest.param({"policy": {"rules": [{"on": ["bogus"], "action": "hold"}]}},
                 "policy.rules[0].on[0]", "'bogus'", id="policy-unknown-cause"),
    pytest.param({"policy": {"rules": [{"on": ["preempted"], "action": "hold",
                                        "budget": "x"}]}},
                 "policy.rules[0].budget", "got `str`", id="policy-budget-str"),
])
def test_malformed_spec_names_the_key(extra: dict, where: str, words: str) -> None:
    with pytest.raises((SpecError, PolicyError)) as err:
        parse_spec({**BASE, **extra}, "job.yaml")
    if isinstance(err.value, PolicyError):  # a bad rule: one of every problem listed
        assert err.value.where == "job.yaml"
        assert any(p.startswith(f"{where}: ") and words in p for p in err.value.problems)
        return
    assert err.value.source == "job.yaml"
    assert err.value.where == where
    assert words in err.value.message


def test_policy_problems_inside_a_spec_are_placed_under_policy() -> None:
    with pytest.raises(PolicyError) as err:
        parse_spec({**BASE, "policy": {"rules": [
            {"on": ["preempted"], "action": "resubmit"},
            {"on": ["preempted"], "action": "hold"}]}}, "job.yaml")
    assert err.value.where == "job.yaml"
    assert err.value.problems == [
        "policy.rules[0]: resubmit needs a budget",
        "policy.rules[1]: preempted is already covered by rules[0]; a cause may be covered "
        "by one rule only",
    ]


def test_a_spec_is_a_mapping() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(["python"], "job.yaml")
    assert err.value.where == "(top)"
    with pytest.raises(SpecError) as err:
        parse_spec({"command": ["a"]}, "job.yaml")
    assert "`name`" in str(err.value)


# --- durations and sizes -------------------------------------------------------------------


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("10m", 600), ("2h", 7200), ("1d", 86400), ("45", 45), (45, 45),
    (" 3m ", 180), ("5 m", 300), ("2h\n", 7200),  # whitespace about it, a newline too
])
def test_durations(text: str | int, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "0s", 0, -5, "-5s", "1.5h", "10x", "h", True,
                                  "2 hours", "1h30m", "\u0667d", "\uff19\uff10s", "1\u00a0h",
                                  "2h\nx"])
def test_bad_durations_are_refused(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)  # type: ignore[arg-type]


@pytest.mark.parametrize("text, size", [
    ("512M", 512 * 1024**2), ("2G", 2 * 1024**3), ("1024K", 1024**2), ("1T", 1024**4),
    ("100", 100), (100, 100), ("7B", 7), ("2GiB", 2 * 1024**3), ("2gb", 2 * 1024**3),
    ("3Mi", 3 * 1024**2),
])
def test_sizes(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "0", "0M", 0, -1, "1.5G", "lots", "M", False, "2P",
                                  "\u0665G", "\uff15\uff11\uff12M"])
def test_bad_sizes_are_refused(text: object) -> None:
    with pytest.raises(ValueError):
        parse_size(text)  # type: ignore[arg-type]
