"""The package as people meet it: docs/spec.md names every key the code accepts,
`dispatch --version` and `dispatch.__version__` say the installed distribution's version."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import dispatch
from dispatch.backends.kubeflow.manifest import (
    KubeflowSection,
    Resources,
    RuntimeRef,
    Toleration,
    Volume,
)
from dispatch.backends.slurm.script import SBATCH_EXTRA_OPTIONS, SLURM_KEYS
from dispatch.core.policy import Rule
from dispatch.core.spec import JobSpec, SegmentHealthSpec

REPO = Path(__file__).resolve().parents[3]
SPEC_DOC = (REPO / "docs" / "spec.md").read_text()


def section(title: str) -> str:
    m = re.search(rf"^## `?{re.escape(title)}`?.*?$(.*?)(?=^## |\Z)", SPEC_DOC, re.M | re.S)
    assert m, f"docs/spec.md has no section {title!r}"
    return m.group(1)


def documented_keys(text: str) -> set[str]:
    """The keys in the first column of the section's table rows."""
    return set(re.findall(r"^\| `([A-Za-z_]+)` \|", text, re.M))


def test_every_top_level_key_is_documented() -> None:
    assert documented_keys(section("Top-level keys")) == set(JobSpec.__struct_fields__)


def test_every_policy_segment_slurm_and_kubeflow_key_is_documented() -> None:
    assert documented_keys(section("policy:")) == set(Rule.__struct_fields__)
    assert documented_keys(section("segment_health:")) == set(
        SegmentHealthSpec.__struct_fields__)
    assert documented_keys(section("slurm:")) == set(SLURM_KEYS)
    assert documented_keys(section("kubeflow:")) == set(KubeflowSection.__struct_fields__)
    for struct in (RuntimeRef, Resources, Volume, Toleration):
        for field in struct.__struct_fields__:
            assert field in section("kubeflow:"), field
    extra_row = section("slurm:").split("| `extra` |", 1)[1].split("\n", 1)[0]
    assert set(re.findall(r"[a-z][a-z-]*[a-z]", extra_row)) >= SBATCH_EXTRA_OPTIONS


def test_version_is_the_distributions() -> None:
    installed = version("dispatch-jobs")
    assert dispatch.__version__ == installed
    done = subprocess.run([sys.executable, "-m", "dispatch.cli", "--version"], text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"dispatch, version {installed}"
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert f"## {installed}" in changelog
    assert "Apache License" in (REPO / "LICENSE").read_text()


def test_every_command_is_found_where_the_lazy_group_looks() -> None:
    import importlib

    from dispatch.cli import COMMAND_MODULES

    defined = {}
    for module in set(COMMAND_MODULES.values()):
        for command in importlib.import_module(module).COMMANDS:
            defined[command.name] = module
    assert defined == COMMAND_MODULES


def test_status_imports_neither_yaml_nor_urllib_request_nor_the_server(tmp_path: Path) -> None:
    code = ("import sys\n"
            "from click.testing import CliRunner\n"
            "from dispatch.cli import main\n"
            "r = CliRunner().invoke(main, ['status', 'no-such-job', '--json'])\n"
            "assert r.exit_code == 3, r.output\n"
            "print(' '.join(m for m in ('yaml', 'urllib.request', 'dispatch.http',\n"
            "      'dispatch.segment_health', 'starlette', 'lightkube') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], text=True, capture_output=True,
                          timeout=60, cwd=tmp_path,
                          env={**os.environ, "DISPATCH_STORE": str(tmp_path / "r.sqlite3")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
