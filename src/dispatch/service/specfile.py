"""Spec and policy files: read from disk and parse YAML, then hand the data to the pure
``dispatch.core.spec`` parsers. The only I/O of spec handling lives here."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
import yaml.composer
import yaml.constructor

from dispatch.backends.registry import traits
from dispatch.core.policy import RecoveryPolicy
from dispatch.core.spec import JobSpec, SpecError, parse_policy, parse_spec

MAX_SPEC_BYTES = 1024 * 1024
MAX_DEPTH = 64


class _Loader(yaml.SafeLoader):
    """Safe YAML with the traps closed: YAML 1.2 booleans only (YAML 1.1 reads the policy key
    ``on:`` as True), no aliases (a 500-byte "billion laughs" expands to gigabytes), no
    duplicate keys (the second would silently win), no nesting deeper than MAX_DEPTH (no
    RecursionError)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in a spec",
                event.start_mark)  # type: ignore[arg-type]
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base class says so
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))


def load_yaml_text(text: str, source: str = "<yaml>") -> Any:
    """Parse YAML text with the traps closed; SpecError naming the line on a problem."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise SpecError(source, where, f"bad YAML: {problem}") from None


def read_text(path: Path) -> str:
    """A spec file's text, read once: a regular file (never a FIFO or a device, which would
    hang or never end), at most MAX_SPEC_BYTES, UTF-8 without NUL bytes."""
    source = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise SpecError(source, "", f"cannot read: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(source, "", "not a regular file")
        if info.st_size > MAX_SPEC_BYTES:
            raise SpecError(source, "", f"{info.st_size} bytes: a spec is at most "
                            f"{MAX_SPEC_BYTES} bytes")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise SpecError(source, "", f"cannot read: {err.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(source, "", f"a spec is at most {MAX_SPEC_BYTES} bytes")
    if b"\x00" in data:
        raise SpecError(source, "", "holds NUL bytes: not a text file (UTF-8 expected)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(source, "", f"not UTF-8 text (byte {err.start})") from None


def load_yaml_file(path: str | Path) -> Any:
    p = Path(path)
    return load_yaml_text(read_text(p), str(p))


def load_spec(path: str | Path) -> JobSpec:
    p = Path(path)
    return parse_spec(load_yaml_file(p), str(p), backends=traits())


def load_policy(path: str | Path) -> RecoveryPolicy:
    p = Path(path)
    return parse_policy(load_yaml_file(p), str(p))
