"""Hypothesis drives the real `dispatch` entry point in-process (issue 21, acceptance): generated
argv lists and generated spec YAML files, against a real SQLite record holding healthy,
ambiguous and unusable jobs. Whatever it is given, the CLI never raises out of its entry point,
never prints a traceback, and exits with a code of the documented table (README "Exit
codes", dispatch.errors, cli.EXIT_PIPE_CLOSED).

About 2,100 examples in the default run (FUZZ_EXAMPLES_ARGV / FUZZ_EXAMPLES_SPEC scale it).
Commands that would start or wait for jobs or servers (run, supervise, serve, watch, submit
without --dry-run, logs --follow) are left out: they are exercised by the e2e tests; what is
fuzzed here is everything that parses input before anything starts."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatch.cli import COMMAND_MODULES, EXIT_PIPE_CLOSED, main
from dispatch.errors import (
    EXIT_BAD_INPUT,
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_STATE,
    EXIT_STORE,
    EXIT_UNREACHABLE,
)

DOCUMENTED = {EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_UNREACHABLE,
              EXIT_STORE, EXIT_STATE, EXIT_CANCELLED, EXIT_PIPE_CLOSED}
ARGV_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES_ARGV", 1300))
SPEC_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES_SPEC", 800))
# Left out: they start or wait for jobs/servers (see the module docstring).
LONG_RUNNING = {"run", "supervise", "serve", "watch"}
NEVER = {"--debug", "--follow", "-f"}  # --debug shows tracebacks by design


def _commands() -> dict[tuple[str, ...], click.Command]:
    ctx = click.Context(main)
    out: dict[tuple[str, ...], click.Command] = {}
    for name in sorted(set(COMMAND_MODULES) - LONG_RUNNING):
        cmd = main.get_command(ctx, name)
        assert cmd is not None
        subs = getattr(cmd, "commands", None)
        if subs:
            out.update({(name, sub): c for sub, c in subs.items()})
            out[(name,)] = cmd
        else:
            out[(name,)] = cmd
    return out


COMMANDS = _commands()


def _options(cmd: click.Command) -> list[str]:
    return sorted({o for p in cmd.params if isinstance(p, click.Option)
                   for o in (*p.opts, *p.secondary_opts)} - NEVER)


class World:
    """The record, local root and files the fuzzed commands see."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = root / "record.sqlite3"
        self.env = {"DISPATCH_STORE": str(self.store),
                    "DISPATCH_LOCAL_ROOT": str(root / "local"),
                    "XDG_STATE_HOME": str(root / "state"),
                    "DISPATCH_ESCALATION_WEBHOOK": None, "DISPATCH_ESCALATION_COMMAND": None}
        self.jobs = self._jobs()
        self.spec_dir = root / "specs"
        self.spec_dir.mkdir()
        good = root / "good.yaml"
        good.write_text('name: ok\ncommand: ["true"]\n')
        self.files = [str(good), str(root), str(root / "missing.yaml"), "/dev/null"]

    def _jobs(self) -> list[str]:
        from tests.specs import parse_spec

        from dispatch.service import Service

        with Service.open(str(self.store)) as service:
            ids = [service.create(parse_spec({"name": n, "command": ["true"]}))
                   for n in ("alpha", "alpha", "beta", "swapped")]
        db = sqlite3.connect(self.store)  # the last job's seq 1 becomes another job's
        db.execute("UPDATE events SET body = (SELECT body FROM events WHERE job_id = ? AND "
                   "seq = 1) WHERE job_id = ? AND seq = 1", (ids[2], ids[3]))
        db.commit()
        db.close()
        return ids


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    world = World(tmp_path_factory.mktemp("fuzz"))
    cwd = os.getcwd()
    os.chdir(world.root / "specs")  # a relative --store names a file here, never in the repo
    try:
        yield world
    finally:
        os.chdir(cwd)


def invoke(world: World, argv: list[str]) -> None:
    result = CliRunner().invoke(main, argv, env=world.env, catch_exceptions=True)
    out = result.output
    shown = f"argv={argv!r}\nexit={result.exit_code}\n{out[-2000:]}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"raised {result.exception!r} out of the entry point\n{shown}"
                             ) from result.exception
    assert "Traceback" not in out, shown
    assert result.exit_code in DOCUMENTED, shown


weird = st.sampled_from([
    "", " ", "-", "--", "0", "-1", "1", "2", "99999999999999999999", "nan", "inf", "-inf",
    "1e999", "0.0", "true", "null", "~", "a\x1b[31mb", "a\x07b\rc", "名前", "a\u202eb",
    "../..", "/", "/dev/null", "/proc/self/mem", "x" * 300, "%s%n", "{}", "[]", "'", '"',
    "postgresql://127.0.0.1:1/db", "sqlite:///nowhere/x.db", "http://", "ftp://x",
    "preempt", "lose-node", "local", "slurm", "kubeflow", "nosuch", "--json", "--help",
    "-h", "--version", "--all",
    # issue 45: argv's non-UTF-8 byte 0xe9 (as surrogateescape gives it), ages in other
    # digits or too long to be a date, a value ending in a newline
    "caf\udce9", "\u00b2d", "\u0667d", "99999999999999d", "9" * 4400 + "d", "30d", "ok\n",
])
free_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"],
                                           blacklist_characters="\x00"), max_size=12)


@st.composite
def argvs(draw: st.DrawFn, world: World) -> list[str]:
    path = draw(st.sampled_from(sorted(COMMANDS)))
    cmd = COMMANDS[path]
    values = st.one_of(weird, free_text, st.sampled_from(world.jobs),
                       st.sampled_from(["alpha", "beta", "swapped", world.jobs[0][:4]]),
                       st.sampled_from(world.files),
                       st.sampled_from([str(world.store), str(world.root),
                                        str(world.root / "nope" / "r.db")]))
    options = _options(cmd)
    token = st.one_of(values, st.sampled_from(options)) if options else values
    rest = draw(st.lists(token, max_size=6))
    if path == ("submit",):
        rest.append("--dry-run")  # a real submit starts the job (e2e covers it)
    head = draw(st.sampled_from([[]] * 8 + [["--version"], ["--help"]]))
    argv = [*head, *path, *rest]
    return [a for a in argv if a not in NEVER]


@pytest.mark.timeout(600)
def test_any_argv_gets_a_documented_exit_code_and_no_traceback(world: World) -> None:
    @settings(max_examples=ARGV_EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        invoke(world, data.draw(argvs(world)))

    run()


# --- spec files --------------------------------------------------------------------------

SPEC_KEYS = ["name", "backend", "command", "nodes", "gpus_per_node", "env", "env_from_host",
             "policy", "time_limit", "memory", "workdir", "local", "slurm", "kubeflow",
             "image", "max_output_bytes", "segment_health", "extra"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), weird, free_text)
values_ = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(weird, inner, max_size=3)), max_leaves=4)
rules = st.lists(st.fixed_dictionaries(
    {"on": st.one_of(st.lists(st.sampled_from(
        ["preempted", "node-lost", "non-zero-exit", "unknown", "held", "released", "oom",
         "timeout", "launch-failed", "nosuch"]), max_size=3), values_),
     "action": st.one_of(st.sampled_from(["resubmit", "hold", "escalate", "restart",
                                          "requeue", "nosuch"]), values_)},
    optional={"budget": st.one_of(st.integers(-3, 1000), values_),
              "enforced_by": st.sampled_from(["supervisor", "backend", "x"])}), max_size=3)
plausible = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["ok", "train-1"]), free_text, weird),
     "command": st.one_of(st.just(["true"]), st.lists(st.one_of(free_text, weird),
                                                     max_size=3), values_)},
    optional={"backend": st.sampled_from(["local", "slurm", "kubeflow", "nosuch"]),
              "nodes": st.one_of(st.integers(-2, 200000), values_),
              "policy": st.one_of(st.fixed_dictionaries({"rules": rules}), values_),
              "env": st.one_of(st.dictionaries(st.one_of(free_text, weird),
                                               st.one_of(free_text, weird), max_size=3),
                               values_),
              "time_limit": st.one_of(st.sampled_from(["1h", "30m", "400d", "-1s", "1e9d"]),
                                      values_),
              "memory": st.one_of(st.sampled_from(["4G", "1T", "-1G", "99999999T"]), values_),
              "local": values_, "slurm": values_, "kubeflow": values_})
anything = st.dictionaries(st.sampled_from(SPEC_KEYS) | free_text, values_, max_size=6)


def _yaml_of(data: Any) -> bytes:
    try:
        return yaml.safe_dump(data, allow_unicode=True).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, UnicodeError, ValueError):
        return repr(data).encode("utf-8", "surrogatepass")


spec_bytes = st.one_of(plausible.map(_yaml_of), anything.map(_yaml_of),
                       st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
                       st.binary(max_size=200))


@pytest.mark.timeout(600)
def test_any_spec_file_gets_a_documented_exit_code_and_no_traceback(world: World) -> None:
    counter = iter(range(10**9))

    @settings(max_examples=SPEC_EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(body=spec_bytes, how=st.sampled_from([
        ["submit", "--dry-run"], ["submit", "--dry-run", "--json"], ["policy", "check"],
        ["policy", "check", "--json"], ["policy", "check", "--backend", "slurm"]]))
    def run(body: bytes, how: list[str]) -> None:
        path = world.spec_dir / f"spec-{next(counter)}.yaml"
        path.write_bytes(body)
        try:
            invoke(world, [*how, str(path)])
        finally:
            path.unlink()

    run()
