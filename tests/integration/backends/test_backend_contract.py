"""The backend contract suite (contract.py) for local and every backend that reuses
LocalBackend, on this machine: real runners, real processes. A registered backend with no lane
of its own (contract.LANES) is run here; a throwaway backend added in its own package and one
registry entry (ssh_local/) passes it too."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.integration.backends.contract import CHECK_IDS, CHECKS, LANES, WORD, Harness, running
from tests.integration.backends.ssh_local import ENTRY

from dispatch.backends.base import Backend
from dispatch.backends.local import LocalBackend
from dispatch.backends.registry import REGISTRY, registered
from dispatch.core.spec import JobSpec

HERE = "tests/integration/backends/test_backend_contract.py"
PY = sys.executable


def local_family_harness(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                         ) -> Harness:
    """A harness for ``name`` built through its registry entry, its root (the entry's root
    variable) under ``tmp_path``."""
    entry = REGISTRY[name]
    assert entry.root_variable is not None, f"{name}: no root variable to point at a test root"

    def made_at(root: Path) -> Backend:
        with monkeypatch.context() as m:
            m.setenv(entry.root_variable or "", str(root))
            return entry.make()

    backend = made_at(tmp_path / "root")
    if not isinstance(backend, LocalBackend):
        pytest.fail(f"{name} is not run by the local runner: give it a lane of its own in "
                    "tests/integration/backends/contract.py LANES", pytrace=False)
    return Harness(
        name=name, backend=backend,
        fresh=lambda: made_at(tmp_path / "root"),
        unreachable=lambda: made_at(tmp_path / "not-mounted" / "root"),
        spec=lambda command: JobSpec(name="contract", command=command, backend=name),
        long=(PY, "-c", "import time; time.sleep(300)"),
        short=(PY, "-c", f"print({WORD!r})"))


# Every registered backend whose lane is this module (one without a lane of its own is run here).
HERE_NAMES = [n for n in REGISTRY if LANES.get(n, HERE) == HERE]


@pytest.mark.parametrize("check", CHECKS, ids=CHECK_IDS)
@pytest.mark.parametrize("name", HERE_NAMES)
def test_contract(name: str, check: Callable[[Harness], None], tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> None:
    with running(local_family_harness(name, tmp_path, monkeypatch)) as h:
        check(h)


@pytest.fixture
def ssh_local() -> Iterator[str]:
    with registered(ENTRY):
        yield ENTRY.name


@pytest.mark.parametrize("check", CHECKS, ids=CHECK_IDS)
def test_contract_of_a_backend_added_in_its_own_package(
        ssh_local: str, check: Callable[[Harness], None], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with running(local_family_harness(ssh_local, tmp_path, monkeypatch)) as h:
        check(h)
