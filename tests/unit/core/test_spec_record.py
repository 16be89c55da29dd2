"""What a job's spec costs its record (issue 50 item 3): a record keeps only what its job uses.

``JobSpec`` is encoded without the keys at their default, so a key added later (a new
backend's section) changes no record of a job that does not use it, and an older build, which
decodes strictly, still reads those records. Records written before (every section written,
empty or not: tests/fixtures/records/before-sections.jsonl, written by the build before this
change) still decode to the same specs. The defaults are part of the format: pinned here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.specs import parse_spec

from dispatch.backends.registry import traits
from dispatch.core import events as ev
from dispatch.core.codec import decode_event, encode_event
from dispatch.core.policy import RecoveryPolicy
from dispatch.core.record import fold
from dispatch.core.spec import JobSpec

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "records" / "before-sections.jsonl"
SECTIONS = ("local", "slurm", "kubeflow")
NOW = datetime(2026, 12, 8, tzinfo=UTC)


def fixture_lines() -> list[str]:
    return FIXTURE.read_text().splitlines()


@pytest.mark.parametrize("line", fixture_lines(), ids=lambda s: json.loads(s)["job_id"])
def test_a_record_written_before_still_decodes_to_the_same_spec(line: str) -> None:
    event = decode_event(line)
    assert isinstance(event, ev.JobCreated)
    written = json.loads(line)["spec"]
    assert set(SECTIONS) <= set(written)  # the old encoding: every section, empty or not
    for key, value in written.items():  # every key kept its value
        assert json.loads(msgspec.json.encode(getattr(event.spec, key))) == value, key
    job = fold([event], NOW)
    assert job.spec == event.spec
    again = decode_event(encode_event(event))  # and written again today, it decodes the same
    assert again == event


@pytest.mark.parametrize("line", fixture_lines(), ids=lambda s: json.loads(s)["job_id"])
def test_written_today_a_record_holds_only_the_sections_its_job_uses(line: str) -> None:
    event = decode_event(line)
    assert isinstance(event, ev.JobCreated)
    spec = json.loads(encode_event(event))["spec"]
    used = {s for s in SECTIONS if getattr(event.spec, s)}
    assert {s for s in SECTIONS if s in spec} == used
    assert used <= {event.spec.backend}


def _older_jobspec(without: str) -> type:
    """JobSpec as a build without the key ``without`` declares it (strict, as every build)."""
    fields: list[Any] = []
    for f in msgspec.structs.fields(JobSpec):
        if f.name == without:
            continue
        if f.default is not msgspec.NODEFAULT:
            fields.append((f.name, f.type, f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, f.type, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, f.type))
    return msgspec.defstruct("JobSpec", fields, kw_only=True, forbid_unknown_fields=True,
                             frozen=True)


@pytest.mark.parametrize("section", SECTIONS)
def test_a_build_without_a_section_reads_the_records_of_jobs_that_do_not_use_it(
        section: str) -> None:
    older = _older_jobspec(section)
    other = next(s for s in SECTIONS if s != section)
    spec = parse_spec({"name": "t", "command": ["x"], "backend": other, other: {"k": "v"}},
                      backends=traits())
    decoded = msgspec.json.decode(msgspec.json.encode(spec), type=older, strict=True)
    assert getattr(decoded, other) == {"k": "v"}
    # A job that does use it is refused by that build (strict), as CHANGELOG must say.
    using = msgspec.structs.replace(spec, **{section: {"k": "v"}})
    with pytest.raises(msgspec.ValidationError, match=section):
        msgspec.json.decode(msgspec.json.encode(using), type=older, strict=True)


# A default is part of the record format: a record omits a key at its default, so changing a
# default would change what every such record means. Add keys; never change a default.
DEFAULTS: dict[str, Any] = {
    "backend": "local", "nodes": 1, "time_limit": None, "memory": None,
    "max_output_bytes": None, "policy": RecoveryPolicy(), "segment_health": None,
    "progress": None, "workdir": None, "env": {}, "env_from_host": (),
    "local": {}, "slurm": {}, "kubeflow": {},
}


def test_the_defaults_of_a_spec_are_pinned() -> None:
    found = {}
    for f in msgspec.structs.fields(JobSpec):
        if f.default is not msgspec.NODEFAULT:
            found[f.name] = f.default
        elif f.default_factory is not msgspec.NODEFAULT:
            found[f.name] = f.default_factory()
    assert found == DEFAULTS


def test_front_ends_show_the_whole_spec_with_its_defaults() -> None:
    """The record omits the keys at their default; the history a front end shows does not
    (service/views.py puts them back), env values hidden as before."""
    from dispatch.service.views import HIDDEN, event_json

    spec = parse_spec({"name": "t", "command": ["x"], "env": {"A": "secret"}},
                      backends=traits())
    event = ev.JobCreated(seq=1, at=NOW, job_id="j", spec=spec, declarations=None,  # type: ignore[arg-type]
                          actor="me")
    shown = event_json(event)["spec"]
    assert set(shown) == set(JobSpec.__struct_fields__)
    assert shown["nodes"] == 1 and shown["slurm"] == {} and shown["env"] == {"A": HIDDEN}
