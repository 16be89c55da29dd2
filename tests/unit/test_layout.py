"""The layout keeps its promises: no module of the package over 500 lines (one responsibility
each), and every rule named in code, help and docs (S7, H4, P2, ...) resolves to its anchor in
docs/semantics.md, so a reader can always look it up inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "dispatch"
MAX_LINES = 500
RULE = re.compile(r"\b([SHPR])(\d{1,2})\b")


def test_no_module_is_over_500_lines() -> None:
    modules = sorted(SRC.rglob("*.py"))
    assert modules
    too_long = {str(p.relative_to(REPO)): n for p in modules
                if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert too_long == {}


# The top level holds only what users import; every other module sits in the package that
# names its part (docs/architecture.md).
PUBLIC_MODULES = {"__init__.py", "api.py", "errors.py", "progress.py"}
# The public packages users import by name (``import dispatch.submitit as submitit``); every
# other package names an internal part (docs/architecture.md).
PUBLIC_PACKAGES = {"submitit"}
INTERNAL_PACKAGES = {"backends", "cli", "core", "fn", "http", "segment_health", "service",
                     "stores", "supervise", "support"}
# The root hands its names on lazily (``import dispatch`` stays quick): its __all__ is long.
INIT_EXEMPT = {SRC / "__init__.py"}
MAX_INIT_LINES = 60


def test_only_the_public_modules_sit_at_the_top() -> None:
    assert {p.name for p in SRC.glob("*.py")} == PUBLIC_MODULES
    packages = {p.parent.name for p in SRC.glob("*/__init__.py")}
    assert packages == PUBLIC_PACKAGES | INTERNAL_PACKAGES


def test_package_inits_hand_names_on() -> None:
    """A package's __init__.py names what the package hands on; the logic lives in modules."""
    inits = [p for p in sorted(SRC.rglob("__init__.py")) if p not in INIT_EXEMPT]
    assert len(inits) > 10
    long = {str(p.relative_to(REPO)): n for p in inits
            if (n := len(p.read_text().splitlines())) > MAX_INIT_LINES}
    defining = [str(p.relative_to(REPO)) for p in inits
                if re.search(r"^(def|class) ", p.read_text(), re.M)]
    assert long == {}
    assert defining == []


def test_test_modules_have_unique_names() -> None:
    """tests/ has no __init__.py: pytest imports each test file by its base name, and two
    files of one name fail the whole run's collection ("import file mismatch")."""
    seen: dict[str, list[str]] = {}
    for p in sorted((REPO / "tests").rglob("test_*.py")):
        seen.setdefault(p.name, []).append(str(p.relative_to(REPO)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}


def test_no_slurm_output_file_sits_in_the_repository_root() -> None:
    """A job submitted without --output writes slurm-<id>.out where sbatch ran; tests and
    benches give every job an output path under a temporary directory (tests/conftest.py
    fails the test after which one appears)."""
    assert sorted(p.name for p in REPO.glob("slurm-*.out")) == []


def _anchors() -> set[str]:
    text = (REPO / "docs" / "semantics.md").read_text()
    return set(re.findall(r'<a id="([a-z0-9]+)"></a>', text))


@pytest.mark.parametrize("where", ["src", "docs", "README.md"])
def test_every_rule_named_resolves_in_the_semantics_page(where: str) -> None:
    anchors = _anchors()
    assert {"s1", "s7", "s16", "h1", "h4", "p2"} <= anchors
    root = REPO / where
    files = [root] if root.is_file() else [
        p for p in root.rglob("*") if p.suffix in (".py", ".md", ".html", ".js")]
    named: dict[str, set[str]] = {}
    for f in files:
        for kind, num in RULE.findall(f.read_text()):
            if kind == "R" and int(num) > 4:
                continue  # R1-R4 are the targets; "R5" and above are not rule names
            named.setdefault(f"{kind}{num}".lower(), set()).add(str(f.relative_to(REPO)))
    missing = {rule: sorted(where_) for rule, where_ in named.items() if rule not in anchors}
    assert missing == {}
