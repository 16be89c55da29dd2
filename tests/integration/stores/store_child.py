"""A second process writing to a store, driven by the contract tests (argv only).

    store_child.py race  URL JOB ROUNDS GODIR TAG   append one event per round when GODIR/go.R
                                                  appears, at expected version 1 + R
    store_child.py batch URL JOB EXPECTED N        append N events in one batch
    store_child.py stall URL JOB EXPECTED N        like batch, but stops for ever half-way
                                                  through the batch (inside the transaction)
    store_child.py loop  URL JOB TAG COUNT SIZE GODIR  when GODIR/go appears, append COUNT
                                                  batches of SIZE events, re-reading the
                                                  version after a conflict
    store_child.py supersede URL JOB GODIR ACTOR  when GODIR/go appears, supersede JOB:
                                                  prints "won NEWID" or "lost ERRORTYPE BY"
Each prints one line per step on stdout, flushed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, overload

from dispatch.core.events import EscalationRaised, Event
from dispatch.core.policy import Declarations
from dispatch.service.requests import supersede
from dispatch.stores.base import AlreadySuperseded, ConflictError
from dispatch.stores.select import open_store

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def say(*words: object) -> None:
    print(*words, flush=True)


def batch(first_seq: int, n: int, tag: str) -> list[Event]:
    return [EscalationRaised(seq=first_seq + i, at=NOW, message=f"{tag} {i}") for i in range(n)]


class StallingBatch(Sequence[Event]):
    """Iterated once to validate, then again to insert: stalls half-way through the second."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.passes = 0

    def __len__(self) -> int:
        return len(self.events)

    @overload
    def __getitem__(self, i: int) -> Event: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Event]: ...
    def __getitem__(self, i: Any) -> Any:
        return self.events[i]

    def __iter__(self) -> Iterator[Event]:
        self.passes += 1
        for i, e in enumerate(self.events):
            if self.passes >= 2 and i == len(self.events) // 2:
                say("inside")
                while True:
                    time.sleep(60)
            yield e


def main(argv: list[str]) -> int:
    mode, url, job = argv[0], argv[1], argv[2]
    with open_store(url) as store:
        if mode == "race":
            rounds, godir, tag = int(argv[3]), Path(argv[4]), argv[5]
            for r in range(rounds):
                while not (godir / f"go.{r}").exists():
                    time.sleep(0.002)
                try:
                    store.append(job, batch(2 + r, 1, f"{tag} round {r}"), 1 + r)
                    say("won", r)
                except ConflictError:
                    say("conflict", r)
        elif mode in ("batch", "stall"):
            expected, n = int(argv[3]), int(argv[4])
            events = batch(expected + 1, n, "batch")
            seq: Sequence[Event] = StallingBatch(events) if mode == "stall" else events
            say("appending")
            started = time.perf_counter()
            store.append(job, seq, expected)
            say("done", time.perf_counter() - started)
        elif mode == "loop":
            tag, count, size, godir = argv[3], int(argv[4]), int(argv[5]), Path(argv[6])
            say("ready")
            while not (godir / "go").exists():
                time.sleep(0.002)
            conflicts = 0
            done = 0
            while done < count:
                v = store.version(job)
                try:
                    store.append(job, batch(v + 1, size, f"{tag} {done}"), v)
                    done += 1
                except ConflictError:
                    conflicts += 1
            say("conflicts", conflicts)
        elif mode == "supersede":
            godir, actor = Path(argv[3]), argv[4]
            say("ready")
            while not (godir / "go").exists():
                time.sleep(0.001)
            try:
                say("won", supersede(store, job, NOW, actor, Declarations(backend="local")))
            except AlreadySuperseded as err:
                say("lost", type(err).__name__, err.by)
        else:
            raise SystemExit(f"unknown mode {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
