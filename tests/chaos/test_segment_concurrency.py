"""Concurrent publishers and clearers against stat-looping readers (H1, H4).

Readers must never see a non-empty per-unit file that is not one complete decision, nor a
``.state`` first line that is not a complete compact array. Loops are bounded by counts;
nothing here waits on or asserts a time.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import stat
from pathlib import Path

import pytest

from dispatch.segment_health.publisher import clear, list_decisions, publish, read_state
from dispatch.segment_health.state import StateFormatError, decode_state

JOB = "77"
SHARED_TASKS = [str(t) for t in range(1, 7)]  # every publisher fights over these
PUBLISHERS = 3
OPS_PER_PUBLISHER = 30
READERS = 2
MAX_READER_PASSES = 200_000  # a bound, not a duration: readers stop when publishers are done

ctx = multiprocessing.get_context("fork")


def publisher_loop(directory: str, index: int, start) -> None:
    start.wait()
    rng = random.Random(index)
    for _ in range(OPS_PER_PUBLISHER):
        task = rng.choice(SHARED_TASKS)
        if rng.random() < 0.6:
            why = "x" * rng.randrange(1, 5000)  # sizes vary: a torn write would show
            publish(directory, JOB, task, decision={"job": JOB, "task": task, "why": why})
        else:
            clear(directory, JOB, task)
    own = str(100 + index)  # end with something published, so readers surely see files
    publish(directory, JOB, own, decision={"job": JOB, "task": own, "why": "final"})


def check_unit(path: Path, task: str, problems: list[str]) -> bool:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
        problems.append(f"{path.name}: visible but not a non-empty regular file ({info})")
        return False
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return False  # cleared between stat and open: fine
    try:
        document = json.loads(raw)
        complete = raw.endswith(b"\n") and document["job"] == JOB and document["task"] == task
    except (ValueError, KeyError, TypeError):
        complete = False
    if not complete:
        problems.append(f"{path.name}: incomplete decision {raw[:80]!r}... ({len(raw)} bytes)")
    return True


def check_state(path: Path, problems: list[str]) -> bool:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return False
    try:
        decode_state(raw)
    except StateFormatError as exc:
        problems.append(f"{path.name}: {exc}")
    return True


def reader_loop(directory: str, done, start, results) -> None:
    root = Path(directory)
    tasks = SHARED_TASKS + [str(100 + i) for i in range(PUBLISHERS)]
    problems: list[str] = []
    seen_units = seen_states = passes = 0
    start.wait()
    final_pass = False
    while passes < MAX_READER_PASSES:
        final_pass = done.is_set()  # read before the pass: the last pass follows every write
        for task in tasks:
            seen_units += check_unit(root / f"segment_health_check.{JOB}.{task}", task, problems)
        seen_states += check_state(root / f"segment_health_check.{JOB}.state", problems)
        passes += 1
        if final_pass:
            break
    results.put((problems[:20], seen_units, seen_states, passes, final_pass))


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_readers_never_see_a_partial_decision_or_state(tmp_path):
    directory = str(tmp_path)
    start, done = ctx.Event(), ctx.Event()
    results = ctx.Queue()
    readers = [
        ctx.Process(target=reader_loop, args=(directory, done, start, results))
        for _ in range(READERS)
    ]
    publishers = [
        ctx.Process(target=publisher_loop, args=(directory, i, start)) for i in range(PUBLISHERS)
    ]
    for process in readers + publishers:
        process.start()
    start.set()
    for process in publishers:
        process.join()
        assert process.exitcode == 0
    done.set()
    reports = [results.get(timeout=240) for _ in readers]
    for process in readers:
        process.join()
    for problems, seen_units, seen_states, _passes, final_pass in reports:
        assert problems == []
        assert final_pass  # the pass after the last write happened (not cut by the bound)
        assert seen_units >= PUBLISHERS and seen_states >= 1  # the readers did look

    # After the dust settles the state is exactly the per-unit files, in numeric order.
    on_disk = [d.task_id for d in list_decisions(directory, JOB)]
    assert read_state(directory, JOB) == on_disk
    assert {str(100 + i) for i in range(PUBLISHERS)} <= set(on_disk)


def victim_loop(directory: str, counter) -> None:
    rng = random.Random(99)
    while True:
        task = rng.choice(SHARED_TASKS)
        publish(directory, JOB, task, decision={"job": JOB, "task": task, "why": "v" * 3000})
        with counter.get_lock():
            counter.value += 1


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_a_killed_publisher_leaves_no_stale_lock_and_its_state_is_repaired(tmp_path):
    directory = str(tmp_path)
    counter = ctx.Value("i", 0)
    victim = ctx.Process(target=victim_loop, args=(directory, counter))
    victim.start()
    while counter.value < 5 and victim.is_alive():
        os.sched_yield()
    os.kill(victim.pid, signal.SIGKILL)  # anywhere: maybe holding the lock, mid-write
    victim.join()
    assert victim.exitcode == -signal.SIGKILL
    # The kernel released its flock: these return, and derive the state afresh.
    publish(directory, JOB, "500", decision={"job": JOB, "task": "500", "why": "after"})
    clear(directory, JOB, "500")
    on_disk = [d.task_id for d in list_decisions(directory, JOB)]
    assert on_disk  # the victim published at least five times
    assert read_state(directory, JOB) == on_disk
    for name in os.listdir(directory):  # at most a hidden temp file, never a torn decision
        assert not name.startswith("segment_health_check.") or (
            name.endswith(".state") or (tmp_path / name).read_bytes().endswith(b"\n")
        )
