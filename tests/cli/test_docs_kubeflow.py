"""docs/kubeflow.md stays true (issue 47 item 9): every `dispatch ...` command it shows, in a
code block or inline, is one the CLI takes with those options (parsed by the real click
commands, nothing run); every job spec it shows passes `dispatch submit --dry-run`; and every
link to an anchor of kubeflow.md or k8s-testbed.md, from any page of docs/ or the README,
names a heading that is there (the testbed's internals moved from one to the other)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from dispatch.cli import main

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "kubeflow.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def commands(text: str) -> list[str]:
    """Each `dispatch ...` command line of a sh block (or a bare block), cut at a pipe, a
    redirect or a comment, and each inline `dispatch ...` without a placeholder syntax
    (marked ``inline:``: prose may name a command without its arguments)."""
    found: list[str] = []
    for lang, body in FENCE.findall(text):
        if lang not in ("", "sh"):
            continue
        for line in body.splitlines():
            line = line.strip()
            if line.startswith("dispatch "):
                found.append(re.split(r" \| | > |\s+#", line)[0])
    prose = FENCE.sub("", text)
    for span in re.findall(r"`(dispatch [^`]+)`", prose):
        span = " ".join(span.split()).split(" | ")[0]
        if not re.search(r"[\[\]|]|\.\.\.", span):  # a synopsis, not a command
            found.append(f"inline: {span}")
    return found


def parse(argv: list[str]) -> None:
    """Resolve ``argv`` through the real command tree; click raises on an unknown command
    or option, a missing argument or a bad value."""
    ctx = main.make_context("dispatch", list(argv))
    cmd: click.Command = main
    while isinstance(cmd, click.Group):
        rest = [*ctx._protected_args, *ctx.args]
        name, sub, rest = cmd.resolve_command(ctx, rest)
        assert sub is not None and name is not None, argv
        ctx = sub.make_context(name, rest, parent=ctx)
        cmd = sub


def test_the_page_shows_commands() -> None:
    shown = commands(PAGE.read_text())
    assert len(shown) >= 20, shown
    for needed in ("dispatch doctor --backend kubeflow", "dispatch kubeflow manifests",
                   "dispatch submit --dry-run", "dispatch status -v"):
        assert any(c.startswith(needed) for c in shown), needed  # in a block, to run


@pytest.mark.parametrize("command", sorted(set(commands(PAGE.read_text()))))
def test_each_command_shown_is_one_the_cli_takes(command: str) -> None:
    inline = command.startswith("inline: ")
    command = command.removeprefix("inline: ")
    try:
        parse(shlex.split(command)[1:])
    except click.MissingParameter:
        if not inline:  # a command to run must be whole; prose may name one
            raise
    except click.ClickException as err:
        pytest.fail(f"docs/kubeflow.md shows `{command}`, which the CLI refuses: "
                    f"{err.format_message()}")


def specs(text: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text)
            if lang == "yaml" and "backend: kubeflow" in body and "name:" in body]


@pytest.mark.parametrize("index", range(len(specs(PAGE.read_text()))))
def test_each_job_spec_shown_passes_the_dry_run(index: int, tmp_path: Path) -> None:
    body = specs(PAGE.read_text())[index]
    assert isinstance(yaml.safe_load(body), dict)
    (tmp_path / "spec.yaml").write_text(body)
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DISPATCH_", "KUBE", "XDG_"))}
    env.update({"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state"),
                "DISPATCH_STORE": str(tmp_path / "record.sqlite3")})
    done = subprocess.run([sys.executable, "-m", "dispatch.cli", "submit", "--dry-run",
                           "spec.yaml"], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "kind: TrainJob" in done.stdout


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set(re.findall(r'<a id="([^"]+)"></a>', page.read_text()))
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


@pytest.mark.parametrize("target", ["kubeflow.md", "k8s-testbed.md", "scheduler-signals.md"])
def test_every_link_to_an_anchor_of_the_kubernetes_pages_resolves(target: str) -> None:
    there = anchors(REPO / "docs" / target)
    missing = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text()
        links = re.findall(rf"\((?:docs/)?{re.escape(target)}#([^)\s]+)\)", text)
        if page.name == target:
            links += re.findall(r"\]\(#([^)\s]+)\)", text)
        missing += [f"{page.relative_to(REPO)}: #{a}" for a in links if a not in there]
    assert not missing, f"links to {target} anchors it lacks: {missing}"
