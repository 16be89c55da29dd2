"""`dispatch segment mark|clear|list`: operator decisions are events in the job's record and
artifacts per seed 002 (a real SQLite store, a real directory; no scheduler is asked)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from click.testing import CliRunner

from dispatch.backends.registry import declarations_for
from dispatch.cli import main
from dispatch.core import events as ev
from dispatch.core.spec import parse_spec
from dispatch.service.requests import create_job
from dispatch.stores.select import open_store

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def slurm_job(store_url: str, seg_dir: Path, ref: str = "4242") -> str:
    spec = parse_spec({"name": "seg", "backend": "slurm", "command": ["train"], "nodes": 2,
                       "segment_health": {"dir": str(seg_dir), "launcher": "ft_launcher"}})
    with open_store(store_url) as store:
        job_id = create_job(store, spec, declarations_for("slurm"), NOW)
        store.append(job_id, [ev.SubmissionIntended(seq=2, at=NOW, submission=1,
                                                    token=f"{job_id}.1"),
                              ev.SubmissionBound(seq=3, at=NOW, submission=1, ref=ref)], 1)
    return job_id


def test_mark_list_clear_are_recorded_and_published(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    seg = tmp_path / "seg"
    job_id = slurm_job(url, seg)
    run = CliRunner()
    marked = run.invoke(main, ["segment", "mark", job_id, "--reason", "bad NIC on n3",
                               "--store", url])
    assert marked.exit_code == 0, marked.output
    unit = seg / "segment_health_check.4242.4242"
    assert unit.stat().st_size > 0
    decision = json.loads(unit.read_text())
    assert decision["why"] == "bad NIC on n3" and decision["cause"] == "operator"
    assert (seg / "segment_health_check.4242.state").read_text() == '["4242"]\n'

    listed = run.invoke(main, ["segment", "list", job_id, "--json", "--store", url])
    rows = json.loads(listed.output)
    assert [(r["unit_job_id"], r["task_id"], r["reason"]) for r in rows] == [
        ("4242", "4242", "bad NIC on n3")]

    cleared = run.invoke(main, ["segment", "clear", job_id, "--reason", "NIC replaced",
                                "--store", url])
    assert cleared.exit_code == 0 and "cleared" in cleared.output
    assert not unit.exists()

    story = run.invoke(main, ["history", job_id, "--store", url]).output
    assert "marked unavailable" in story and "bad NIC on n3" in story
    assert "cleared" in story and "NIC replaced" in story


def test_array_task_is_marked_under_the_array_job_id(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    seg = tmp_path / "seg"
    job_id = slurm_job(url, seg, ref="1080_1")
    done = CliRunner().invoke(main, ["segment", "mark", job_id, "--task", "1", "--reason",
                                     "drained", "--store", url])
    assert done.exit_code == 0, done.output
    assert (seg / "segment_health_check.1080.1").stat().st_size > 0


def test_mark_without_a_decision_directory_is_a_clear_error(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    spec = parse_spec({"name": "plain", "backend": "slurm", "command": ["train"]})
    with open_store(url) as store:
        job_id = create_job(store, spec, declarations_for("slurm"), NOW)
    done = CliRunner().invoke(main, ["segment", "mark", job_id, "--reason", "x",
                                     "--store", url])
    assert done.exit_code == 2
    assert "no segment_health.dir" in done.output
