"""Text a spec may not hold (issue 21 items 5 and 17): control characters in a job's name (a
terminal would act on them) and a lone surrogate anywhere (no UTF-8 encoder can write it, so
the record, argv or a batch script would fail later with a traceback). Both refused at
validation with a SpecError naming the field; and env_from_host names are checked."""

from __future__ import annotations

import pytest
from tests.specs import check_spec, parse_spec

from dispatch.core.spec import JobSpec, SpecError

BASE = {"name": "ok", "command": ["true"]}


@pytest.mark.parametrize("char", ["\x1b", "\x07", "\r", "\t", "\x08", "\x7f", "\x85", "\x9b"],
                         ids=["ESC", "BEL", "CR", "TAB", "BS", "DEL", "NEL", "CSI"])
def test_a_control_character_in_the_name_is_refused_naming_the_field(char: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, "name": f"job{char}]0;pwned"}, "job.yaml")
    assert err.value.where == "name" and err.value.source == "job.yaml"
    assert f"U+{ord(char):04X}" in err.value.message


def test_a_name_with_other_unicode_is_accepted() -> None:
    assert parse_spec({**BASE, "name": "ünïcødé 漢字 train-v2"}).name == "ünïcødé 漢字 train-v2"


@pytest.mark.parametrize("extra, where", [
    pytest.param({"name": "a\ud800"}, "name", id="name"),
    pytest.param({"command": ["python3", "-c", "print('\udc80')"]}, "command[2]", id="command"),
    pytest.param({"env": {"A": "x\ud800"}}, "env.A", id="env-value"),
    pytest.param({"env": {"A\ud800": "x"}}, "env.'A\\ud800'", id="env-name"),
    pytest.param({"workdir": "/tmp/\udfff"}, "workdir", id="workdir"),
    pytest.param({"backend": "slurm", "slurm": {"partition": "p\ud800"}}, "slurm.partition",
                 id="slurm-section"),
    pytest.param({"backend": "slurm", "slurm": {"extra": ["--mail-user=\ud800"]}},
                 "slurm.extra[0]", id="slurm-extra"),
    pytest.param({"backend": "kubeflow", "kubeflow": {"runtime": "r", "labels": {"a": "\ud800"}}},
                 "kubeflow.labels.a", id="kubeflow-nested"),
    pytest.param({"env_from_host": ["\ud800"]}, "env_from_host[0]", id="env-from-host"),
    pytest.param({"policy": {"rules": [{"on": ["preempted\ud800"], "action": "hold"}]}},
                 "policy.rules[0].on[0]", id="policy"),
])
def test_a_lone_surrogate_anywhere_is_refused_naming_the_field(extra: dict[str, object],
                                                               where: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, **extra}, "job.yaml")
    assert err.value.where == where
    assert "lone surrogate" in err.value.message
    str(err.value).encode("utf-8")  # the error itself can be printed and sent


def test_a_jobspec_made_in_python_gets_the_same_checks() -> None:
    """dispatch.submit(JobSpec(...)) skips parse_spec: check_spec (called by prepare) refuses
    the same text."""
    with pytest.raises(SpecError) as err:
        check_spec(JobSpec(name="ok", command=("echo", "\ud800")))
    assert err.value.where == "command[1]"
    with pytest.raises(SpecError) as err:
        check_spec(JobSpec(name="bad\x1b[2J", command=("true",)))
    assert err.value.where == "name"


@pytest.mark.parametrize("extra, where, words", [
    pytest.param({"env_from_host": ["1TOKEN"]}, "env_from_host[0]", "not an environment",
                 id="bad-name"),
    pytest.param({"env_from_host": ["A=B"]}, "env_from_host[0]", "not an environment",
                 id="equals"),
    # issue 45: re.match(r"^...$") took a name ending in "\n" ("$" matches before it)
    pytest.param({"env_from_host": ["TOKEN\n"]}, "env_from_host[0]", "not an environment",
                 id="ends-in-newline"),
    pytest.param({"env_from_host": ["TOKEN", "TOKEN"]}, "env_from_host[1]", "twice",
                 id="twice"),
    pytest.param({"env_from_host": ["TOKEN"], "env": {"TOKEN": "x"}}, "env_from_host[0]",
                 "also in env", id="also-in-env"),
    pytest.param({"env_from_host": "TOKEN"}, "env_from_host", "Expected `array`",
                 id="not-a-list"),
    pytest.param({"env": {"A\x1bB": "x"}}, "env.'A\\x1bB'", "control character",
                 id="env-name-control"),
])
def test_env_from_host_and_env_names_are_checked(extra: dict[str, object], where: str,
                                                 words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, **extra}, "job.yaml")
    assert err.value.where == where
    assert words in err.value.message


def test_env_from_host_keeps_its_names() -> None:
    spec = parse_spec({**BASE, "env_from_host": ["HF_TOKEN", "WANDB_API_KEY"]})
    assert spec.env_from_host == ("HF_TOKEN", "WANDB_API_KEY")
