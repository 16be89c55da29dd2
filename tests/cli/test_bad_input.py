"""Bad input gets a typed, clear error with its documented exit code, valid JSON on stdout
with --json, and nothing recorded (issue 13: "Bad input", "CLI numbers")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.cli.conftest import invoke

from dispatch.cli import main
from dispatch.core.spec import SpecError
from dispatch.service.specfile import load_yaml_text, read_text
from dispatch.stores.sqlite import SQLiteStore

GOOD = 'name: ok\ncommand: ["true"]\n'

# (file name, bytes) of specs that must be refused with exit 2, and a word of the message.
BAD_SPECS: list[tuple[str, bytes, str]] = [
    ("bomb.yaml", b'a: &a ["x","x","x","x"]\nb: &b [*a,*a,*a,*a]\nc: [*b,*b,*b,*b]\n'
                  b'name: x\ncommand: ["true"]\n', "aliases"),
    ("dup.yaml", b'name: x\nname: y\ncommand: ["true"]\n', "duplicate key"),
    ("deep.yaml", b'name: x\ncommand: ["true"]\nenv: ' + b"[" * 3000 + b"]" * 3000 + b"\n",
     "nested deeper"),
    ("utf16.yaml", "name: x\n".encode("utf-16"), "NUL"),
    ("latin1.yaml", b"name: \xe9t\xe9\ncommand: [\"true\"]\n", "UTF-8"),
    ("big.yaml", b"name: x\n" + b"#" * (1024 * 1024 + 1), "at most"),
    ("nodes.yaml", b'name: x\ncommand: ["true"]\nnodes: 100001\n', "nodes"),
    ("zero-nodes.yaml", b'name: x\ncommand: ["true"]\nnodes: 0\n', "nodes"),
    ("time.yaml", b'name: x\ncommand: ["true"]\ntime_limit: 99999999999999999999999d\n',
     "time_limit"),
    ("time-long.yaml", b'name: x\ncommand: ["true"]\ntime_limit: 400d\n', "over 366 days"),
    ("memory.yaml", b'name: x\ncommand: ["true"]\nmemory: 9999999T\n', "over 1 PiB"),
    ("nul-arg.yaml", b'name: x\ncommand: ["a\\0b"]\n', "NUL"),
    ("nul-env.yaml", b'name: x\ncommand: ["true"]\nenv: {A: "a\\0"}\n', "NUL"),
    ("eq-env.yaml", b'name: x\ncommand: ["true"]\nenv: {"A=B": "1"}\n', "'='"),
    ("local-key.yaml", b'name: x\ncommand: ["true"]\nlocal: {cpus: 2}\n', "local.cpus"),
    ("shell.yaml", b'name: x\ncommand: "python train.py"\n', "argv list"),
    ("backend.yaml", b'name: x\ncommand: ["true"]\nbackend: pbs\n', "unknown backend"),
    ("two-lines.yaml", b'name: "a\\nb"\ncommand: ["true"]\n', "one line"),
    # issue 45: re.match(r"^...$") took a value ending in "\n"; `submit --dry-run` exited 0
    ("slurm-newline.yaml", b'name: x\nbackend: slurm\ncommand: ["true"]\n'
                           b'slurm: {partition: "gpu\\n"}\n', "slurm.partition"),
    # Past NAME_MAX or PATH_MAX every filesystem call fails (ENAMETOOLONG): refused first.
    ("long-name.yaml", b'name: x\ncommand: ["true"]\nworkdir: /tmp/' + b"a" * 256 + b"\n",
     "workdir: has a component of 256 bytes"),
    ("long-path.yaml", b'name: x\ncommand: ["true"]\nworkdir: /' + b"b/" * 2048 + b"\n",
     "workdir: is 4097 bytes long"),
]


def recorded(env: dict[str, str]) -> int:
    path = Path(env["DISPATCH_STORE"])
    if not path.exists():
        return 0
    with SQLiteStore(path) as store:
        return len(store.list_jobs())


@pytest.mark.parametrize(("name", "content", "word"), BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
@pytest.mark.parametrize("command", ["submit", "run"])
def test_a_bad_spec_is_refused_and_records_nothing(tmp_path: Path, env: dict[str, str],
                                                    name: str, content: bytes, word: str,
                                                    command: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    code, out, err = invoke(env, command, str(path), "--json")
    assert code == 2, (out, err)
    doc = json.loads(out)
    assert doc["error"]["code"] == "bad-input" and doc["error"]["exit_code"] == 2
    assert word in doc["error"]["message"] and name in doc["error"]["message"]
    assert "Traceback" not in err
    assert recorded(env) == 0


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_is_refused_without_hanging(tmp_path: Path, env: dict[str, str],
                                                     special: str) -> None:
    path = special
    if special == "fifo":
        path = str(tmp_path / "spec.yaml")
        os.mkfifo(path)
    code, out, _ = invoke(env, "submit", path, "--json")
    assert code == 2 and "not a regular file" in json.loads(out)["error"]["message"]


def test_a_job_name_is_text_never_markup(tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text('name: "[/]"\ncommand: ["true"]\n')
    code, out, err = invoke(env, "run", str(path), "--poll", "0.1")
    assert code == 0, (out, err)
    code, out, _ = invoke(env, "ls", "--all")
    assert code == 0 and "[/]" in out


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "x", "1e9"])
@pytest.mark.parametrize("command", [["run", "SPEC", "--poll"], ["supervise", "--poll"],
                                     ["watch", "--interval"]])
def test_poll_and_interval_are_positive_finite(tmp_path: Path, env: dict[str, str],
                                               command: list[str], value: str) -> None:
    spec = tmp_path / "ok.yaml"
    spec.write_text(GOOD)
    args = [str(spec) if a == "SPEC" else a for a in command]
    code, out, err = invoke(env, *args, value)
    assert code == 2 and "seconds" in (out + err)
    assert recorded(env) == 0


def test_errors_are_json_with_json(env: dict[str, str]) -> None:
    code, out, _ = invoke(env, "status", "nope", "--json")
    assert code == 3
    assert json.loads(out) == {"error": {"code": "not-found", "exit_code": 3,
                                         "message": "no such job: nope"}}


def test_debug_shows_the_real_traceback(env: dict[str, str]) -> None:
    result = CliRunner().invoke(main, ["--debug", "status", "nope"], env=env)
    assert result.exception is not None
    assert type(result.exception).__name__ == "JobNotFound"


def test_local_inject_on_a_finished_job_is_a_state_conflict(tmp_path: Path,
                                                             env: dict[str, str]) -> None:
    spec = tmp_path / "ok.yaml"
    spec.write_text(GOOD)
    assert invoke(env, "run", str(spec), "--poll", "0.1")[0] == 0
    code, _, err = invoke(env, "local", "inject", "ok", "preempt")
    assert code == 6 and "ended" in err


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_are_a_spec_or_a_clear_error(data: bytes) -> None:
    """The file reader and the YAML parser never raise anything but SpecError."""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".yaml") as f:
        f.write(data)
        f.flush()
        try:
            load_yaml_text(read_text(Path(f.name)), f.name)
        except SpecError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("[]{}:,&*!-|>'\"#\n ab1")), max_size=200))
def test_yaml_like_text_is_parsed_or_refused_clearly(text: str) -> None:
    try:
        load_yaml_text(text, "<t>")
    except SpecError:
        pass


# A job reference or name that is not UTF-8 (issue 45 item 4): argv's byte 0xe9 arrives as
# U+DCE9 (surrogateescape); the store's query, or a JSON encoder, failed on it with a
# traceback. Each command that takes a job reference or a name, and ls's and cancel's --name.
NOT_UTF8 = "caf\udce9"
REFERENCES: list[list[str]] = [
    ["status", NOT_UTF8], ["history", NOT_UTF8], ["logs", NOT_UTF8], ["cancel", NOT_UTF8],
    ["cancel", "--name", NOT_UTF8], ["goodput", NOT_UTF8], ["supersede", NOT_UTF8],
    ["resubmit", NOT_UTF8], ["give-up", NOT_UTF8], ["ls", "--name", NOT_UTF8],
    ["segment", "list", NOT_UTF8],
]
WITHOUT_JSON: list[list[str]] = [["local", "inject", NOT_UTF8, "preempt"],
                                 ["segment", "mark", NOT_UTF8, "--reason", "r"],
                                 ["segment", "clear", NOT_UTF8, "--reason", "r"]]


@pytest.mark.parametrize("args", REFERENCES + WITHOUT_JSON,
                         ids=[" ".join(a[:2]) for a in REFERENCES + WITHOUT_JSON])
def test_a_reference_that_is_not_utf8_is_a_usage_error(env: dict[str, str],
                                                       args: list[str]) -> None:
    as_json = args in REFERENCES
    result = CliRunner().invoke(main, [*args, "--json"] if as_json else args, env=env)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # not the store's UnicodeEncodeError
    assert "'caf\\xe9' is not UTF-8 text" in result.stderr
    if as_json:
        message = json.loads(result.stdout)["error"]["message"]
        assert "'caf\\xe9' is not UTF-8 text" in message
    assert recorded(env) == 0


def test_the_real_process_shows_the_bytes_escaped(env: dict[str, str]) -> None:
    """Through real argv bytes, as a shell passes $'caf\\xe9'."""
    proc = subprocess.run([sys.executable.encode(), b"-m", b"dispatch.cli", b"status",
                           b"caf\xe9"], env={**os.environ, **env}, capture_output=True,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert b"Traceback" not in proc.stderr
    assert b"Invalid value for 'JOB': 'caf\\xe9' is not UTF-8 text" in proc.stderr


def test_the_python_api_refuses_such_a_reference(env: dict[str, str]) -> None:
    from dispatch.errors import BadInput
    from dispatch.service import Service

    with Service.open(env["DISPATCH_STORE"]) as service, pytest.raises(BadInput) as err:
        service.resolve(NOT_UTF8)
    assert "'caf\\xe9' is not UTF-8 text" in str(err.value)


@pytest.mark.parametrize("section", ['{runtime: t, labels: {team: "a\\n"}}',
                                     '{runtime: t, namespace: "ns\\n"}',
                                     '{runtime: "torch\\n"}'])
def test_a_kubernetes_value_ending_in_a_newline_is_refused_by_dry_run(
        tmp_path: Path, env: dict[str, str], section: str) -> None:
    """Issue 45 item 6: re.match(r"^...$") took it ("$" matches before a final newline)."""
    path = tmp_path / "k.yaml"
    path.write_text(f'name: x\nbackend: kubeflow\ncommand: ["true"]\nkubeflow: {section}\n')
    code, out, err = invoke(env, "submit", "--dry-run", str(path), "--json")
    assert code == 2, (out, err)
    assert json.loads(out)["error"]["message"].startswith("kubeflow.")
    assert recorded(env) == 0
