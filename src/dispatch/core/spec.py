"""Job specs and policy files: strict decoding from YAML with errors that name the file and key.

Pure: ``parse_*`` take already-loaded data. Reading and parsing YAML files (the I/O) lives in
``dispatch.service.specfile``.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from typing import Any

import msgspec

from dispatch.core.backend_traits import BackendTraits, Enforces, enforcing
from dispatch.core.policy import PolicyError, RecoveryPolicy, Rule
from dispatch.core.progress import ProgressSpec, pattern_problem
from dispatch.core.suggest import did_you_mean, explain
from dispatch.errors import BadInput


class SpecError(BadInput, ValueError):
    """A spec or policy file that cannot be used, naming the file and the place."""

    def __init__(self, source: str, where: str, message: str) -> None:
        self.source = source
        self.where = where
        self.message = message
        loc = f"{source}: {where}" if where else source
        super().__init__(f"{loc}: {message}")


class SpecProblems(SpecError):
    """A spec with several problems, every one reported at once: ``problems`` lists each as
    ``place: what`` (``where`` and ``message`` are the first's)."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.problems = [f"{where}: {message}" for where, message in problems]
        Exception.__init__(self)
        self.source = source
        self.where, self.message = problems[0]
        self.args = (f"{source}: {len(problems)} problems:\n  " + "\n  ".join(self.problems),)


# Bounds a real job stays far inside; past them a number is a typo (or an attack on a
# scheduler's argument parser), refused with integer arithmetic, never rounded.
MAX_NODES = 100_000
MAX_DURATION_S = 366 * 86_400
MAX_SIZE_BYTES = 1024**5  # 1 PiB per node
MAX_DIGITS = 20
# Linux's bounds on a path (NAME_MAX, PATH_MAX with its NUL), in bytes: past them every
# filesystem call fails with ENAMETOOLONG, so a workdir is refused before any is made.
NAME_MAX = 255
PATH_MAX = 4096

# A portable environment variable name (POSIX): what env_from_host may name.
# Each for fullmatch: "^...$" with match takes a value ending in "\n" ("$" matches before a
# final newline).
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# C0 controls, DEL and C1 controls: a terminal acts on them (ESC starts a sequence that can
# retitle or clear the terminal, CR forges a line), so a name may not hold one.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A lone UTF-16 surrogate: a Python str may hold one, no UTF-8 encoder (the record, JSON,
# argv, a file) can write it.
_SURROGATE = re.compile(r"[\ud800-\udfff]")

# ASCII digits only: \d and int() take any Unicode digit ("٧d" would be a week).
_DURATION = re.compile(r"\s*([0-9]+)\s*(s|m|h|d)?\s*", re.ASCII)
_SIZE = re.compile(r"\s*([0-9]+)\s*([KMGT]i?B?|B)?\s*", re.IGNORECASE | re.ASCII)


def parse_duration(text: str | int) -> int:
    """'90s', '10m', '2h', '1d' or a bare number of seconds -> seconds."""
    if isinstance(text, bool):
        raise ValueError(f"not a duration: {text!r}")
    if isinstance(text, int):
        value = text
    else:
        m = _DURATION.fullmatch(str(text))
        if not m or len(m.group(1)) > MAX_DIGITS:
            raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 10m, 2h)")
        value = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2) or "s"]
    if value <= 0:
        raise ValueError(f"duration must be positive, got {text!r}")
    if value > MAX_DURATION_S:
        raise ValueError(f"duration {text!r} is over {MAX_DURATION_S // 86_400} days")
    return value


def parse_size(text: str | int) -> int:
    """'512M', '2G', '1024K' or a bare number of bytes -> bytes."""
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE.fullmatch(str(text))
        if not m or len(m.group(1)) > MAX_DIGITS:
            raise ValueError(f"not a size: {text!r} (use e.g. 512M, 2G)")
        unit = (m.group(2) or "B").upper()[:1]
        scale = {"B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}[unit]
        value = int(m.group(1)) * scale
    if value <= 0:
        raise ValueError(f"size must be positive, got {text!r}")
    if value > MAX_SIZE_BYTES:
        raise ValueError(f"size {text!r} is over 1 PiB")
    return value


class SegmentHealthSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    dir: str
    launcher: str = "none"  # none | ft_launcher | torchrun


class JobSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True,
              omit_defaults=True):
    """What a person asks to run. Times in seconds, sizes in bytes once parsed.

    Encoded without the keys that hold their default (``omit_defaults``): a record keeps only
    what its job uses, so a key added later (a new backend's section) changes no record that
    does not use it, and an older build still reads those records. A default is therefore
    part of the record format: never change one (tests/unit/core/test_spec_record.py pins
    them); docs/architecture.md says what adding a key costs."""

    name: str
    command: tuple[str, ...]
    backend: str = "local"
    nodes: int = 1
    time_limit: int | None = None
    memory: int | None = None
    # Bytes of output each node may write to its log; the rest is dropped (backends that
    # enforce OUTPUT_BOUND).
    max_output_bytes: int | None = None
    policy: RecoveryPolicy = RecoveryPolicy()
    segment_health: SegmentHealthSpec | None = None
    # A log pattern that says a checkpoint became durable (G3), for a training that cannot
    # write DISPATCH_PROGRESS_FILE (backends that enforce LOG_PROGRESS).
    progress: ProgressSpec | None = None
    workdir: str | None = None
    env: dict[str, str] = {}
    # Names of variables whose values are read from the submitter's environment at submission
    # and kept beside the record, never in it (dispatch.backends.hostenv): the record holds
    # the names.
    env_from_host: tuple[str, ...] = ()
    # The backends' free-form sections (a registry entry's ``section`` names its own).
    local: dict[str, Any] = {}
    slurm: dict[str, Any] = {}
    kubeflow: dict[str, Any] = {}


_SPEC_KEYS = set(JobSpec.__struct_fields__)


def _msgspec_where(err: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec says '... - at `$.rules[0].on[1]`'; split that into (where, message), an
    invalid word's message naming the valid values (and the closest)."""
    text = str(err)
    m = re.search(r" - at `\$\.?(.*)`$", text)
    if m:
        where = m.group(1) or "(top)"
        return where, explain(text[: m.start()], where)
    return "", text


def parse_policy(data: Any, source: str = "<policy>", prefix: str = "") -> RecoveryPolicy:
    """Decode and validate a policy mapping. Every problem is reported, with its place: each
    rule is decoded on its own, so a bad word in rules[0] does not hide one in rules[1]."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(source, prefix or "(top)", "a policy is a mapping with a 'rules' list")
    rules = data.get("rules", [])
    if not isinstance(rules, list):
        try:
            msgspec.convert(data, RecoveryPolicy, strict=True)
        except msgspec.ValidationError as err:
            where, message = _msgspec_where(err)
            raise SpecError(source, _join(prefix, where), message) from None
    problems: list[str] = []
    decoded: list[Rule] = []
    original: list[int] = []  # decoded rule j is rules[original[j]] in the file
    if isinstance(rules, list):
        for i, raw in enumerate(rules):
            try:
                decoded.append(msgspec.convert(raw, Rule, strict=True))
                original.append(i)
            except msgspec.ValidationError as err:
                for where, message in _rule_problems(raw, err):
                    problems.append(f"{_join(prefix, f'rules[{i}]' + _dot(where))}: {message}")
    try:
        policy = msgspec.convert({**data, "rules": []}, RecoveryPolicy, strict=True)
    except msgspec.ValidationError as err:
        where, message = _msgspec_where(err)
        if not problems:
            raise SpecError(source, _join(prefix, where), message) from None
        problems.insert(0, f"{_join(prefix, where)}: {message}")
    policy = RecoveryPolicy(rules=tuple(decoded))

    def renumber(problem: str) -> str:
        return re.sub(r"rules\[(\d+)\]", lambda m: f"rules[{original[int(m.group(1))]}]",
                      problem)

    problems.extend(_join(prefix, renumber(p)) for p in policy.problems())
    if problems:
        raise PolicyError(problems, where=source)
    return policy


def _rule_problems(raw: Any, err: msgspec.ValidationError) -> list[tuple[str, str]]:
    """Every bad field of a rule that did not decode (msgspec names only the first): each
    field decoded on its own; the decoder's own first problem when no field alone is bad."""
    found: list[tuple[str, str]] = []
    if isinstance(raw, dict):
        for field in msgspec.structs.fields(Rule):
            if field.name not in raw:
                continue
            value = raw[field.name]
            args = typing.get_args(field.type)
            if isinstance(value, list) and typing.get_origin(field.type) is tuple \
                    and len(args) == 2 and args[1] is Ellipsis:
                # A list (``on``): every bad item, not only the first the decoder meets.
                items = [(f"{field.name}[{j}]", x, args[0]) for j, x in enumerate(value)]
            else:
                items = [(field.name, value, field.type)]
            for name, item, kind in items:
                try:
                    msgspec.convert(item, kind, strict=True)
                except msgspec.ValidationError as field_err:
                    where, message = _msgspec_where(field_err)
                    where = _join(name, where)
                    found.append((where, explain(message, where)))
    return found or [_msgspec_where(err)]


def _dot(where: str) -> str:
    if not where or where == "(top)":
        return ""
    return where if where.startswith("[") else f".{where}"


def _join(prefix: str, where: str) -> str:
    if not prefix:
        return where
    if not where or where == "(top)":
        return prefix
    return f"{prefix}.{where}" if not where.startswith("[") else f"{prefix}{where}"


def _surrogate_at(data: Any, where: str) -> str | None:
    """The place of the first string (a value or a mapping key) holding a lone surrogate."""
    if isinstance(data, str):
        return where if _SURROGATE.search(data) else None
    if isinstance(data, dict):
        for key, value in data.items():
            place = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and _SURROGATE.search(key):
                return f"{where}.{key!r}" if where else repr(key)
            found = _surrogate_at(value, place)
            if found is not None:
                return found
        return None
    if isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            found = _surrogate_at(value, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def check_text(data: Any, source: str = "<spec>") -> None:
    """Refuse a spec (as parsed data, or a JobSpec) holding a string no encoder can write: a
    lone surrogate in any value or key, found before anything is recorded or sent."""
    if isinstance(data, msgspec.Struct):
        data = msgspec.to_builtins(data)
    where = _surrogate_at(data, "")
    if where is not None:
        raise SpecError(source, where or "(top)", "holds a lone surrogate (\\ud800-\\udfff): "
                        "not text that can be written as UTF-8")


def parse_spec(data: Any, source: str = "<spec>", *,
               backends: Mapping[str, BackendTraits]) -> JobSpec:
    """Decode and check a spec mapping. Every problem is reported at once (``SpecProblems``,
    or the one ``SpecError``; a policy's own problems alone stay a ``PolicyError``), each with
    its place; an unknown key gets the closest known one. ``backends``: the backends the spec
    may name and what each enforces (``registry.traits()``)."""
    if not isinstance(data, dict):
        raise SpecError(source, "(top)", "a job spec is a mapping")
    check_text(data, source)
    problems: list[tuple[str, str]] = []
    known = ", ".join(sorted(_SPEC_KEYS))
    raw = {}
    for key in sorted(data, key=str):
        if key in _SPEC_KEYS:
            raw[key] = data[key]
        else:
            problems.append((str(key), f"unknown key{did_you_mean(str(key), _SPEC_KEYS)} "
                                       f"(known keys: {known})"))
    for key, parse in (("time_limit", parse_duration), ("memory", parse_size),
                       ("max_output_bytes", parse_size)):
        if raw.get(key) is not None:
            try:
                raw[key] = parse(raw[key])
            except ValueError as err:
                problems.append((key, str(err)))
                del raw[key]
    if "command" in raw and isinstance(raw["command"], str):
        problems.append(("command", "command is an argv list, e.g. [python, train.py]"))
        del raw["command"]
    policy: RecoveryPolicy | None = None
    policy_error: PolicyError | None = None
    try:
        policy = parse_policy(raw.pop("policy", None), source, "policy")
    except PolicyError as err:
        policy_error = err
        problems += [_split(p) for p in err.problems]
    except SpecError as err:
        problems.append((err.where, err.message))
    for field in msgspec.structs.fields(JobSpec):  # each key on its own: none hides another
        if field.name in raw:
            try:
                msgspec.convert(raw[field.name], field.type, strict=True)
            except msgspec.ValidationError as err:
                where, message = _msgspec_where(err)
                problems.append((_join(field.name, where), message))
                del raw[field.name]
        elif field.required and field.name in data:
            pass  # already reported above, with its own words
        elif field.required:
            problems.append(("(top)", f"Object missing required field `{field.name}`"))
    if problems:
        # The checks beyond types on what did decode, beside the problems found so far (a
        # required key missing or bad is stood in for by a valid placeholder here; a bad
        # key was taken out of ``raw``, so none is reported twice).
        try:
            partial = msgspec.convert({"name": "x", "command": ["x"], **raw}, JobSpec,
                                      strict=True)
            problems += [p for p in spec_problems(partial, backends)
                         if p[0].split(".")[0] in raw]
        except msgspec.ValidationError:
            pass
    spec = None
    if not problems:
        try:
            spec = msgspec.convert(raw, JobSpec, strict=True)
        except msgspec.ValidationError as err:
            where, message = _msgspec_where(err)
            raise SpecError(source, where, message) from None
        assert policy is not None
        spec = msgspec.structs.replace(spec, policy=policy)
        problems += spec_problems(spec, backends)
    if policy_error is not None and len(problems) == len(policy_error.problems):
        raise policy_error
    if len(problems) == 1:
        raise SpecError(source, *problems[0])
    if problems:
        raise SpecProblems(source, problems)
    assert spec is not None
    return spec


def _split(problem: str) -> tuple[str, str]:
    """``"policy.rules[0]: resubmit needs a budget"`` as (place, what)."""
    where, _, message = problem.partition(": ")
    return where, message


def check_spec(spec: JobSpec, source: str = "<spec>", *,
               backends: Mapping[str, BackendTraits]) -> None:
    """What every spec must hold beyond its types, whether it came from a file, a request or
    a ``JobSpec`` made in Python: refused with a SpecError naming the key (SpecProblems
    naming each, when there are several). ``backends`` as ``parse_spec``'s."""
    check_text(spec, source)
    problems = spec_problems(spec, backends)
    if len(problems) == 1:
        raise SpecError(source, *problems[0])
    if problems:
        raise SpecProblems(source, problems)


def path_problem(path: str) -> str:
    """Why no Linux call can take ``path`` ("" when its length is fine): a component over
    NAME_MAX bytes or the whole at PATH_MAX bytes or more. Bytes as os.fsencode gives them
    (UTF-8 here: a spec's text is checked to be UTF-8 before this)."""
    raw = path.encode("utf-8", "surrogatepass")
    if len(raw) >= PATH_MAX:
        return f"is {len(raw)} bytes long: a path must be under {PATH_MAX} bytes (PATH_MAX)"
    longest = max(raw.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        start = longest[:24].decode("utf-8", "replace")
        return (f"has a component of {len(longest)} bytes ({start!r}...): a file name is at "
                f"most {NAME_MAX} bytes (NAME_MAX)")
    return ""


def spec_problems(spec: JobSpec, backends: Mapping[str, BackendTraits]
                  ) -> list[tuple[str, str]]:
    """Every problem of a typed spec beyond its types, as (place, what). ``backends``: the
    backends a spec may name, with what each enforces."""
    found: list[tuple[str, str]] = []
    traits = backends.get(spec.backend)
    if traits is None:
        found.append(("backend", f"unknown backend {spec.backend!r}"
                                 f"{did_you_mean(spec.backend, list(backends))} "
                                 f"({', '.join(backends)})"))
    if not spec.name.strip():
        found.append(("name", "must not be empty"))
    command_ok = bool(spec.command) and all(isinstance(a, str) and a for a in spec.command)
    if not command_ok:
        found.append(("command", "must be a non-empty argv list of non-empty strings"))
    if not 1 <= spec.nodes <= MAX_NODES:
        found.append(("nodes", f"must be 1..{MAX_NODES}, got {spec.nodes}"))
    for i, arg in enumerate(spec.command if command_ok else ()):
        if "\x00" in arg:
            found.append((f"command[{i}]", "holds a NUL byte (no argv can carry it)"))
    if spec.workdir is not None and (why := path_problem(spec.workdir)):
        found.append(("workdir", why))
    for key, value in spec.env.items():
        if not key or "=" in key or _CONTROL.search(key):
            found.append((f"env.{key!r}", "an environment variable name may not be empty or "
                                          "hold '=' or a control character"))
        if "\x00" in value:
            found.append((f"env.{key}", "holds a NUL byte (no environment can carry it)"))
    found += _env_from_host_problems(spec)
    if "\x00" in spec.name or "\n" in spec.name:
        found.append(("name", "must be one line without NUL bytes"))
    control = _CONTROL.search(spec.name)
    if control:
        found.append(("name", f"holds the control character U+{ord(control.group()):04X} "
                              "(a terminal would act on it)"))
    def refused(what: Enforces) -> bool:
        return traits is not None and what not in traits.enforces

    def who(what: Enforces) -> str:
        names = enforcing(backends, what)
        return (f"only the {' and '.join(names)} backend{'s' if len(names) > 1 else ''}"
                if names else "no backend here")

    if spec.max_output_bytes is not None and refused(Enforces.OUTPUT_BOUND):
        found.append(("max_output_bytes", f"{who(Enforces.OUTPUT_BOUND)} enforces it (the "
                                          f"{spec.backend} backend keeps the output where "
                                          "its scheduler writes it)"))
    if spec.progress is not None:
        why = pattern_problem(spec.progress.checkpoint_pattern)
        if why:
            found.append(("progress.checkpoint_pattern", why))
        if refused(Enforces.LOG_PROGRESS):
            found.append(("progress", f"{who(Enforces.LOG_PROGRESS)} reads a log pattern (on "
                                      f"the {spec.backend} backend, write "
                                      "DISPATCH_PROGRESS_FILE)"))
    if spec.segment_health is not None:
        if refused(Enforces.SEGMENT_HEALTH):
            found.append(("segment_health", "segment health decisions name allocation units: "
                                            f"{who(Enforces.SEGMENT_HEALTH)} publishes them "
                                            f"(not the {spec.backend} backend)"))
        if not spec.segment_health.dir.startswith("/"):
            found.append(("segment_health.dir", "must be an absolute path"))
        if spec.segment_health.launcher not in LAUNCHERS:
            found.append(("segment_health.launcher",
                          f"must be none, ft_launcher or torchrun"
                          f"{did_you_mean(spec.segment_health.launcher, LAUNCHERS)}"))
    return found


LAUNCHERS = ("none", "ft_launcher", "torchrun")


def _env_from_host_problems(spec: JobSpec) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, name in enumerate(spec.env_from_host):
        where = f"env_from_host[{i}]"
        if not _ENV_NAME.fullmatch(name):
            found.append((where, f"{name!r} is not an environment variable name (letters, "
                                 "digits and _, not starting with a digit)"))
        if name in seen:
            found.append((where, f"names {name} twice"))
        if name in spec.env:
            found.append((where, f"{name} is also in env: a variable takes its value from "
                                 "one place"))
        seen.add(name)
    return found
