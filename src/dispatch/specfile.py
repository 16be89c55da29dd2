"""Spec and policy files: read from disk and parse YAML, then hand the data to the pure
``dispatch.core.spec`` parsers. The only I/O of spec handling lives here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from dispatch.core.policy import RecoveryPolicy
from dispatch.core.spec import JobSpec, SpecError, parse_policy, parse_spec


class _Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true/false. YAML 1.1 reads the policy key `on:` as True."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))


def load_yaml_text(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def _load_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as err:
        raise SpecError(str(path), "", f"cannot read: {err.strerror}") from None
    try:
        return load_yaml_text(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise SpecError(str(path), where, f"bad YAML: {problem}") from None


def load_spec(path: str | Path) -> JobSpec:
    p = Path(path)
    return parse_spec(_load_yaml(p), str(p))


def load_policy(path: str | Path) -> RecoveryPolicy:
    p = Path(path)
    return parse_policy(_load_yaml(p), str(p))
