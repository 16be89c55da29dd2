"""The registry walk (issue 50 item 4): every registered backend appears everywhere it must,
and the checklist a newcomer follows (docs/architecture.md#a-backend) is complete. Each miss
is named with its place, so a new backend's entry fails here first, saying what to add.

Everything below is derived from the registry entry except what a person must write: the
backend's package, its docs and a contract lane. ``problems`` returns every miss at once.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest
from tests.integration.backends.contract import LANES
from tests.integration.backends.ssh_local import ENTRY
from tests.specs import parse_spec

from dispatch.backends import registry
from dispatch.backends.base import Backend
from dispatch.backends.local import LocalBackend
from dispatch.backends.registry import REGISTRY, BackendEntry, registered
from dispatch.core.backend_traits import Enforces
from dispatch.core.spec import JobSpec, SpecError
from dispatch.supervise import scopes

REPO = Path(__file__).resolve().parents[3]
ARCHITECTURE = REPO / "docs" / "architecture.md"
CONTRACT_HERE = "tests/integration/backends/test_backend_contract.py"


def _built(entry: BackendEntry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Backend:
    if entry.root_variable is not None:  # never the user's own root, nor a relative one
        monkeypatch.setenv(entry.root_variable, str(tmp_path / entry.package))
    return entry.make()


def _spec_with(name: str, what: Enforces) -> dict[str, object]:
    extra: dict[str, object] = {
        Enforces.OUTPUT_BOUND: {"max_output_bytes": "1M"},
        Enforces.LOG_PROGRESS: {"progress": {"checkpoint_pattern": "saved"}},
        Enforces.SEGMENT_HEALTH: {"segment_health": {"dir": "/shared/seg"}},
    }[what]
    return {"name": "walk", "command": ["true"], "backend": name, **extra}


def problems(entry: BackendEntry, backend: Backend, *, packages: str = "dispatch.backends",
             docs: bool = True) -> list[str]:
    """Every place ``entry``'s backend is missing from, as 'place: what'."""
    name = entry.name
    out: list[str] = []
    try:
        registry.check_entry(entry)
    except Exception as err:  # noqa: BLE001 - reported as a miss
        out.append(f"backends/registry.py BackendEntry: {err}")
    # Its package, named by the name ("-" as "_"), holds the class the entry builds.
    package = f"{packages}.{entry.package}"
    try:
        importlib.import_module(package)
    except ImportError as err:
        out.append(f"{package.replace('.', '/')}/: no such package ({err})")
    module = type(backend).__module__
    if not (module == package or module.startswith(package + ".")):
        out.append(f"{package}: the entry builds {type(backend).__qualname__} from "
                   f"{module}, outside its package")
    # The protocol, every member.
    for member in ("name", "submit_in_flight", *_protocol_methods()):
        if not hasattr(backend, member):
            out.append(f"{type(backend).__qualname__}: no {member} (backends/base.py Backend)")
    if getattr(backend, "name", None) != name:
        out.append(f"{type(backend).__qualname__}.name is {getattr(backend, 'name', None)!r}, "
                   f"the registry says {name!r}")
    elif backend.declarations().backend != name:
        out.append(f"{type(backend).__qualname__}.declarations(): backend "
                   f"{backend.declarations().backend!r}, not {name!r}")
    # The spec language: the core's table, a spec naming it, and each rule on what it does.
    if registry.traits().get(name) != entry.traits():
        out.append(f"registry.traits() (the core's table): {name} is not as its entry says")
    try:
        parse_spec({"name": "walk", "command": ["true"], "backend": name})
    except SpecError as err:
        out.append(f"core/spec.py: a spec naming backend {name} is refused: {err}")
    for what in Enforces:
        try:
            parse_spec(_spec_with(name, what))
            taken = True
        except SpecError:
            taken = False
        if taken != (what in entry.enforces):
            out.append(f"core/spec.py: {what.value} is {'taken' if taken else 'refused'} on "
                       f"{name}, whose entry {'does not enforce' if taken else 'enforces'} it")
    if entry.section is not None and entry.section not in JobSpec.__struct_fields__:
        out.append(f"core/spec.py JobSpec: no field {entry.section} (its section)")
    # Supervision: its scopes, and the backends a supervisor serves by itself.
    if name not in scopes.backends():
        out.append(f"supervise/scopes.py backends(): no {name}")
    if scopes.backend_of(f"{name}:somewhere") != name:
        out.append(f"supervise/scopes.py backend_of: {name}:somewhere is not {name}'s")
    if (name in scopes.asks_no_scheduler()) == entry.asks_scheduler:
        out.append(f"supervise/scopes.py asks_no_scheduler(): {name} is wrong")
    if not entry.asks_scheduler:
        scope = scopes.scope_for(name, backend)
        if not scope.startswith(f"{name}:"):
            out.append(f"{name}'s scope {scope!r} does not start with {name}:")
    # The path variable checked at start.
    if entry.root_variable is not None and entry.root_variable not in registry.path_variables():
        out.append(f"backends/registry.py path_variables(): no {entry.root_variable}")
    # Its contract lane.
    lane = LANES.get(name, CONTRACT_HERE)
    if lane == CONTRACT_HERE and not isinstance(backend, LocalBackend):
        out.append(f"tests/integration/backends/contract.py LANES: no lane for {name} (only a "
                   "backend that reuses LocalBackend runs in test_backend_contract.py)")
    elif not (REPO / lane).is_file():
        out.append(f"{lane}: no such contract module for {name}")
    elif lane != CONTRACT_HERE and lane not in (script := (REPO / "scripts" / "test").read_text()) \
            and str(Path(lane).parent) not in script:
        out.append(f"scripts/test: no lane runs {lane}")
    if docs:
        out += _doc_problems(entry)
    return out


def _doc_problems(entry: BackendEntry) -> list[str]:
    out: list[str] = []
    readme = (REPO / "README.md").read_text()
    if f"**{entry.name}**" not in readme:
        out.append(f"README.md Backends: no paragraph on **{entry.name}**")
    docs = "\n".join(p.read_text() for p in (REPO / "docs").glob("*.md")) + readme
    if entry.root_variable is not None and entry.root_variable not in docs:
        out.append(f"docs: {entry.root_variable} is not documented")
    spec_doc = (REPO / "docs" / "spec.md").read_text()
    if entry.section is not None and f"`{entry.section}`" not in spec_doc:
        out.append(f"docs/spec.md: no row for its section `{entry.section}`")
    return out


def _protocol_methods() -> list[str]:
    return [n for n, v in inspect.getmembers(Backend, inspect.isfunction)
            if not n.startswith("_")]


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registered_backend_appears_everywhere_it_must(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = REGISTRY[name]
    backend = _built(entry, tmp_path, monkeypatch)
    try:
        assert problems(entry, backend) == []
    finally:
        backend.close()


@pytest.fixture
def ssh_local() -> Iterator[BackendEntry]:
    with registered(ENTRY) as entry:
        yield entry


def test_a_backend_added_in_its_own_package_and_one_entry_appears_everywhere(
        ssh_local: BackendEntry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The throwaway ssh-local (its package and entry only): every derived list has it. Its
    docs would be the house's; here it lives in tests, so they are not asked for."""
    backend = _built(ssh_local, tmp_path, monkeypatch)
    assert problems(ssh_local, backend, packages="tests.integration.backends",
                    docs=False) == []
    assert registry.names()[-1] == "ssh-local" and "DISPATCH_SSH_LOCAL_ROOT" in \
        registry.path_variables()


def test_when_it_is_gone_it_is_gone_everywhere() -> None:
    with registered(ENTRY):
        pass
    assert "ssh-local" not in registry.names() and "ssh-local" not in scopes.backends()
    assert "ssh-local" not in registry.traits()
    with pytest.raises(SpecError, match="unknown backend 'ssh-local'"):
        parse_spec({"name": "walk", "command": ["true"], "backend": "ssh-local"})


def test_the_walk_names_the_place_a_backend_is_missing_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry that says one thing and a backend that does another: each place named."""
    class Misnamed(LocalBackend):
        name = "local"  # forgot to say its own name

    lying = BackendEntry(name="ssh-local", make=lambda: Misnamed(tmp_path / "r"),
                         summary="x", scope=registry.local_scope, asks_scheduler=False,
                         root_variable="DISPATCH_SSH_LOCAL_ROOT", section="nonexistent",
                         enforces=frozenset({Enforces.SEGMENT_HEALTH}))
    with registered(ENTRY):
        found = problems(lying, Misnamed(tmp_path / "r"), packages="tests.integration.backends",
                         docs=True)
    text = "\n".join(found)
    assert "section 'nonexistent' is no JobSpec section" in text
    assert "Misnamed.name is 'local', the registry says 'ssh-local'" in text
    assert "registry.traits() (the core's table): ssh-local is not as its entry says" in text
    assert "README.md Backends: no paragraph on **ssh-local**" in text


def test_the_checklist_names_every_protocol_member_and_entry_field() -> None:
    """docs/architecture.md#a-backend is the one checklist: it names every member of the
    protocol and every field of the entry, the paths it names exist, and README links to it
    instead of keeping a second one."""
    text = ARCHITECTURE.read_text()
    checklist = text[text.index("\n## A backend\n"):]
    checklist = checklist[:checklist.find("\n## ", 5) if "\n## " in checklist[5:] else None]
    for member in ("name", "submit_in_flight", *_protocol_methods()):
        assert f"`{member}`" in checklist, f"docs/architecture.md#a-backend: no `{member}`"
    for f in fields(BackendEntry):
        assert f"`{f.name}`" in checklist, f"docs/architecture.md#a-backend: no `{f.name}`"
    for path in re.findall(r"`((?:src/dispatch/|tests/|scripts/|docs/)?[\w/]+\.(?:py|md))`",
                           checklist):
        candidates = [REPO / path, REPO / "src" / "dispatch" / path,
                      REPO / "src" / "dispatch" / "backends" / path]
        assert any(p.exists() for p in candidates), f"docs/architecture.md#a-backend: {path}"
    readme = (REPO / "README.md").read_text()
    assert "docs/architecture.md#a-backend" in readme
    assert "scope_for" not in readme and "mapping.py" not in readme
