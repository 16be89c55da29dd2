"""Escalation webhooks and commands are checked at start (issue 21, item 16): the pure checks,
the Notifier the Python side builds, and the CLI options in-process (exit 2 naming the option
and its environment variable; nothing recorded)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dispatch.cli import main
from dispatch.errors import EXIT_BAD_INPUT, BadInput
from dispatch.supervise.escalations import Notifier, check_webhook, split_command

BAD_WEBHOOKS = ["ftp://h/x", "h/x", "http://", "https:///x", "http://[::1", "http://h:p/x",
                "http://h/a b", "http://h/\x07", "javascript:alert(1)", "file:///etc/passwd"]
GOOD_WEBHOOKS = ["http://h/x", "https://hooks.example:8443/a?b=c", "http://127.0.0.1:9/",
                 "http://[::1]:80/x"]
BAD_COMMANDS = ["", "   ", "notify 'open", 'a "b', "''", "a\\"]


@pytest.mark.parametrize("url", BAD_WEBHOOKS)
def test_a_webhook_that_can_never_be_used_is_refused(url: str) -> None:
    with pytest.raises(BadInput) as err:
        check_webhook(url, "W")
    assert str(err.value).startswith("W: ") and err.value.exit_code == EXIT_BAD_INPUT
    with pytest.raises(BadInput):
        Notifier(webhook=url)


@pytest.mark.parametrize("url", GOOD_WEBHOOKS)
def test_an_http_url_with_a_host_is_accepted(url: str) -> None:
    assert check_webhook(url) == url
    assert Notifier(webhook=url).webhook == url


@pytest.mark.parametrize("text", BAD_COMMANDS)
def test_a_command_that_splits_to_no_program_is_refused(text: str) -> None:
    with pytest.raises(BadInput):
        split_command(text, "C")


def test_a_command_splits_like_a_shell_never_runs_one() -> None:
    assert split_command("notify --to 'ops team' $HOME;x") == [
        "notify", "--to", "ops team", "$HOME;x"]
    with pytest.raises(BadInput):
        Notifier(command="notify")  # type: ignore[arg-type]  # a string, not an argv
    with pytest.raises(BadInput):
        Notifier(command=["", "x"])
    with pytest.raises(BadInput):
        Notifier(command=["a\0b"])


@pytest.mark.parametrize("variable, value", [
    ("DISPATCH_ESCALATION_WEBHOOK", "ftp://x/y"),
    ("DISPATCH_ESCALATION_COMMAND", "a 'b"),
])
def test_the_cli_refuses_them_from_the_environment_before_anything_starts(
        tmp_path: Path, variable: str, value: str) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text('name: ok\ncommand: ["true"]\n')
    store = tmp_path / "r.sqlite3"
    env = {"DISPATCH_STORE": str(store), "DISPATCH_LOCAL_ROOT": str(tmp_path / "local"),
           "XDG_STATE_HOME": str(tmp_path / "state"), variable: value}
    for argv in (["submit", str(spec)], ["supervise", "--once"], ["supersede", "x"]):
        result = CliRunner().invoke(main, argv, env=env)
        assert result.exit_code == EXIT_BAD_INPUT, (argv, result.output)
        assert variable in result.stderr and "Traceback" not in result.output
    assert not store.exists()  # nothing opened, nothing recorded
