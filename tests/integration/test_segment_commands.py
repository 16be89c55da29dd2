"""`dispatch segment mark|clear|list`: operator decisions are events in the job's record and
artifacts per seed 002 (a real SQLite store, a real directory; no scheduler is asked)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.specs import parse_spec

from dispatch.backends.registry import declarations_for
from dispatch.cli import main
from dispatch.core import events as ev
from dispatch.segment_health.commands import mark, unmark
from dispatch.segment_health.directory import DirectoryUnusable, SymlinkRefused, check_usable
from dispatch.service.requests import create_job
from dispatch.stores.base import StoreError
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
    assert "decided unavailable" in story and "bad NIC on n3" in story
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


# -- issue 13: validate everything first, write the file, then record -------------------------


def events_of(url: str, job_id: str) -> list[str]:
    with open_store(url) as store:
        return [type(e).__name__ for e in store.read(job_id)]


def files_in(seg: Path) -> list[str]:
    return sorted(os.listdir(seg)) if seg.exists() else []


REFUSED_MARKS = [
    (["--task", "007", "--reason", "x"], "write 7"),
    (["--task", "../../x", "--reason", "x"], "decimal digits"),
    (["--task", "-1", "--reason", "x"], "decimal digits"),
    (["--task", "٣", "--reason", "x"], "decimal digits"),  # an Arabic-Indic digit
    (["--reason", ""], "blank"),
    (["--reason", "   \t "], "blank"),
    (["--reason", "tab\there"], "U+0009"),
    (["--reason", "  "], "blank"),
    (["--reason", "bad NIC\n4242  unit 4242.1  /x  forged"], "U+000A"),
    (["--reason", "bad\rNIC"], "U+000D"),
    (["--reason", "\x1b[2Jcleared"], "U+001B"),
    (["--reason", "line\u2028separator"], "U+2028"),
    (["--reason", "evil\u202eoverride"], "U+202E"),
    (["--reason", "x" * 1001], "at most 1000"),
]


@pytest.mark.parametrize(("args", "words"), REFUSED_MARKS)
def test_a_refused_mark_writes_and_records_nothing(tmp_path: Path, args: list[str],
                                                   words: str) -> None:
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    seg = tmp_path / "seg"
    job_id = slurm_job(url, seg, ref="1080")
    before = events_of(url, job_id)
    done = CliRunner().invoke(main, ["segment", "mark", job_id, *args, "--store", url])
    assert done.exit_code == 2, done.output
    assert words in done.output and "Traceback" not in done.output
    assert events_of(url, job_id) == before
    assert files_in(seg) == []


def test_a_directory_that_is_a_file_is_refused_before_anything(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    seg = tmp_path / "seg"
    seg.write_text("I am a file")
    job_id = slurm_job(url, seg)
    before = events_of(url, job_id)
    done = CliRunner().invoke(main, ["segment", "mark", job_id, "--reason", "x",
                                     "--store", url])
    assert done.exit_code == 2 and "not a directory" in done.output and str(seg) in done.output
    assert events_of(url, job_id) == before and seg.read_text() == "I am a file"


def test_a_directory_under_a_file_is_refused(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    (tmp_path / "file").write_text("x")
    job_id = slurm_job(url, tmp_path / "file" / "seg")
    before = events_of(url, job_id)
    done = CliRunner().invoke(main, ["segment", "mark", job_id, "--reason", "x",
                                     "--store", url])
    assert done.exit_code == 2 and "not a directory" in done.output
    assert events_of(url, job_id) == before


def test_an_unwritable_directory_is_refused(tmp_path: Path) -> None:
    """check_usable as user nobody (root would pass the mode bits)."""
    base = Path(tempfile.mkdtemp())
    try:
        base.chmod(0o755)
        (base / "seg").mkdir(mode=0o755)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: drop to nobody when root, report through the pipe
            code = 0
            try:
                if os.geteuid() == 0:
                    os.setgid(65534)
                    os.setuid(65534)
                else:
                    (base / "seg").chmod(0o555)
                words = []
                for path in (base / "seg", base / "seg" / "new" / "deeper"):
                    try:
                        check_usable(path)
                        words.append("usable")
                    except DirectoryUnusable as exc:
                        words.append(str(exc))
                os.write(write_end, "\n".join(words).encode())
            except BaseException:
                code = 1
            os._exit(code)
        os.close(write_end)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read_end) as pipe:
            words = pipe.read().splitlines()
        assert os.waitstatus_to_exitcode(status) == 0
        assert words[0].endswith("is not writable") and str(base / "seg") in words[0]
        assert "cannot be created" in words[1] and "is not writable" in words[1]
    finally:
        shutil.rmtree(base)


def test_a_mark_whose_record_append_fails_leaves_no_file(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    seg = tmp_path / "seg"
    job_id = slurm_job(url, seg)

    class AppendFails:
        def __init__(self, store: Any) -> None:
            self.store = store

        def __getattr__(self, name: str) -> Any:
            return getattr(self.store, name)

        def append(self, *args: Any, **kwargs: Any) -> int:
            raise StoreError("disk I/O error (injected)")

    with open_store(url) as store:
        before = [type(e).__name__ for e in store.read(job_id)]
        with pytest.raises(StoreError):
            mark(AppendFails(store), job_id, None, "bad NIC", "alice", NOW)
        assert [type(e).__name__ for e in store.read(job_id)] == before
    assert [n for n in files_in(seg) if not n.startswith(".")] == []


def test_clear_records_only_once_the_file_is_gone(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    seg = tmp_path / "seg"
    job_id = slurm_job(url, seg)
    with open_store(url) as store:
        mark(store, job_id, None, "bad NIC", "alice", NOW)
        unit = seg / "segment_health_check.4242.4242"
        unit.unlink()
        victim = tmp_path / "victim"
        unit.symlink_to(victim)  # planted after the mark
        before = [type(e).__name__ for e in store.read(job_id)]
        with pytest.raises(SymlinkRefused):
            unmark(store, job_id, None, "fixed", "alice", NOW)
        assert [type(e).__name__ for e in store.read(job_id)] == before  # nothing recorded
        assert os.path.islink(unit) and not os.path.lexists(victim)
        unit.unlink()  # a person looked, and removed the link
        assert unmark(store, job_id, None, "fixed", "alice", NOW) is False
        assert [type(e).__name__ for e in store.read(job_id)][-1] == "SegmentCleared"
        # Nothing recorded and nothing on disk: a clear has nothing to say.
        count = len(store.read(job_id))
        assert unmark(store, job_id, None, "", "alice", NOW) is False
        assert len(store.read(job_id)) == count


def test_clear_refuses_a_control_character_in_its_reason(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    seg = tmp_path / "seg"
    job_id = slurm_job(url, seg)
    run = CliRunner()
    assert run.invoke(main, ["segment", "mark", job_id, "--reason", "bad NIC",
                             "--store", url]).exit_code == 0
    before = events_of(url, job_id)
    done = run.invoke(main, ["segment", "clear", job_id, "--reason", "ok\nforged",
                             "--store", url])
    assert done.exit_code == 2 and "U+000A" in done.output
    assert events_of(url, job_id) == before
    assert (seg / "segment_health_check.4242.4242").exists()


def test_list_shows_an_old_multiline_reason_on_one_line(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    seg = tmp_path / "seg"
    job_id = slurm_job(url, seg)
    with open_store(url) as store:
        mark(store, job_id, None, "bad NIC", "alice", NOW)
        version = store.version(job_id)  # a record written before reasons were checked
        store.append(job_id, [ev.SegmentPublished(seq=version + 1, at=NOW, unit_job_id="4242",
                                                  task_id="4242", reason="a\nfake  row",
                                                  actor="old")], version)
    listed = CliRunner().invoke(main, ["segment", "list", job_id, "--store", url])
    assert listed.exit_code == 0
    assert len(listed.output.splitlines()) == 1 and "a\\u000afake  row" in listed.output


def test_clear_of_a_recorded_decision_whose_directory_is_gone(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    seg = tmp_path / "seg"
    job_id = slurm_job(url, seg)
    with open_store(url) as store:
        mark(store, job_id, None, "bad NIC", "alice", NOW)
        shutil.rmtree(seg)
        assert unmark(store, job_id, None, "node replaced", "alice", NOW) is False
        assert type(store.read(job_id)[-1]).__name__ == "SegmentCleared"
    assert [n for n in files_in(seg) if not n.startswith(".")] == []
