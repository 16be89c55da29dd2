"""A local backend's looks at its objects, and what changed between them (issue 49).

A *full look* lists ``objects/`` and reads every wanted object's files (its status, its
runner's /proc entry, its nodes' progress files): a backend's first look, one every
``full_every`` (a safety net, FULL_LOOK_EVERY), and one whenever the change journal cannot
say what it missed. Every other look reads only the objects that may have changed since the
previous one:

- those named in the change journal since (journal.py): every status a runner writes, a
  node's progress file that changed, an object a submit published;
- those whose runner died since (deaths.py: a pidfd per live runner, so a SIGKILLed runner,
  which writes nothing, is seen at the next look, as a full look would see it);
- those asked for that it never read, and the few it must read each time (a verdict it
  could not write yet, an unreadable meta.json, a runner that is not of this boot).

Every other object is answered with the report it was last given: nothing of its files
changed, and its runner lives, so a full look would read the same report. Each look says
which objects changed since the previous one (``Discovery.changes``): those read again
whose report differs from the one last given, and every ref the journal or a death named.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from dispatch.backends.base import ChangeJournal
from dispatch.backends.local.deaths import RunnerWatch
from dispatch.backends.local.journal import JournalReader
from dispatch.backends.local.reports import missing, unreadable
from dispatch.backends.local.root import ref_root
from dispatch.backends.local.wire import RootMarker, utcnow
from dispatch.core.model import Discovery, ObjectReport, SchedulerUnreachable

if TYPE_CHECKING:
    from dispatch.backends.local.backend import LocalBackend

FULL_LOOK_EVERY = timedelta(minutes=10)


class LocalLooks:
    """What one LocalBackend remembers between its looks."""

    def __init__(self, backend: LocalBackend, full_every: timedelta | None) -> None:
        self.b = backend
        self.full_every = full_every
        self.journal = JournalReader(backend.root)
        self.watch = RunnerWatch(backend._boot_id)
        self.changes = ChangeJournal()
        self.reports: dict[str, ObjectReport] = {}  # the report last given, by ref
        self.by_token: dict[str, tuple[str, ...]] = {}  # every object's refs, by its token
        self.token_of: dict[str, str] = {}
        self.again: set[str] = set()  # read at the next look, whatever the journal says
        self.missing: set[str] = set()  # refs answered as missing (no object here)
        self.last_full: datetime | None = None
        self.full_looks = 0  # counted, for tests and benchmarks
        self.reads = 0  # objects whose files were read, in any look
        self._order: tuple[frozenset[str], tuple[str, ...]] | None = None
        # the last changed look's question and answer (tokens, refs, objects, complete)
        self._answer: tuple[set[str], set[str], tuple[ObjectReport, ...], bool] | None = None
        self._pos: dict[str, int] | None = None  # where each ref is in the last answer

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        """The look the backend protocol asks for (LocalBackend.discover)."""
        wanted_tokens, wanted_refs = set(tokens), set(refs)
        now = utcnow()
        b = self.b
        try:
            marker = b.disk.marker()
        except SchedulerUnreachable:
            adopted = b.disk.adopt_legacy()
            if adopted is None:
                if wanted_refs or not b.disk.never_used():
                    raise
                # No object was ever recorded and the root was never made: nothing carries
                # the tokens (a first submit that died before making the root is retried).
                return Discovery(at=now, objects=(), complete=True)
            marker = adopted
        touched = None if self._full_due(now) else self._touched()
        if touched is None:
            objects, complete = self._full(wanted_tokens, wanted_refs, marker, now)
        else:
            objects, complete = self._changed(touched, wanted_tokens, wanted_refs, marker,
                                              now)
        return Discovery(at=now, objects=objects, complete=complete,
                         changes=self.changes.take())

    def close(self) -> None:
        """Let the runners' pidfds go; the next look is a full one."""
        self.watch.close()
        self.last_full = None

    # ---------------------------------------------------------------- which looks

    def _full_due(self, now: datetime) -> bool:
        last = self.last_full
        return last is None or now < last or (
            self.full_every is not None and now - last >= self.full_every)

    def _touched(self) -> set[str] | None:
        """The refs to read again at this look; None: the journal cannot tell (full look)."""
        named = self.journal.read()
        if named is None:
            return None
        self.b._reap_exited()  # so that no runner of ours is a zombie still listed
        dead = self.watch.dead()
        self.b._reap_runners(dead)
        named |= dead
        named |= self.again
        self.again = set()
        return named

    def _full(self, wanted_tokens: set[str], wanted_refs: set[str], marker: RootMarker,
              now: datetime) -> tuple[tuple[ObjectReport, ...], bool]:
        b = self.b
        self.journal.start()  # before reading: what is appended during this look is read next
        self.watch.dead()  # every object is read now
        b._reap_runners()
        before, self.reports, self.by_token, self.token_of = self.reports, {}, {}, {}
        self.again, self.missing, self._order, self._answer = set(), set(), None, None
        self._pos = None
        order: list[str] = []
        for ref in b.disk.scan():
            meta = b.disk.load_meta(ref)
            if isinstance(meta, str):
                if ref in wanted_refs:
                    order.append(ref)
                    self.reports[ref] = unreadable(ref, None, f"meta.json unreadable: {meta}")
                    self.again.add(ref)
                continue
            self._index(ref, meta.token)
            if meta.token in wanted_tokens or ref in wanted_refs:
                order.append(ref)
                self.reports[ref] = self._read(ref, now)
        complete = True
        for ref in sorted(wanted_refs - self.reports.keys()):
            made_in = ref_root(ref)
            if made_in is not None and made_in != marker.id[:8]:
                complete = False  # made in another root (not mounted here): no answer
                continue
            order.append(ref)
            self.reports[ref] = missing(ref, b.objects_dir, marker.id, now)
            self.missing.add(ref)
        for ref in before.keys() | self.reports.keys():
            old, new = before.get(ref), self.reports.get(ref)
            if old != new:
                self.changes.note(ref, _token(old), _token(new))
        self.last_full = now
        self.full_looks += 1
        return tuple(self.reports[r] for r in order), complete

    def _changed(self, touched: set[str], wanted_tokens: set[str], wanted_refs: set[str],
                 marker: RootMarker, now: datetime) -> tuple[tuple[ObjectReport, ...], bool]:
        last = self._answer
        same = last is not None and last[0] == wanted_tokens and last[1] == wanted_refs
        if same and not touched:
            assert last is not None
            return last[2], last[3]  # nothing read, nothing changed: the same answer
        if same:
            patched = self._patched(touched, wanted_tokens, wanted_refs, now)
            if patched is not None:
                return patched
        self._answer, self._pos = None, None
        dropped = {ref: self.reports.pop(ref, None) for ref in touched}
        for ref in touched:
            self.missing.discard(ref)
            self._reindex(ref)
        want = set(wanted_refs)
        want.update(itertools.chain.from_iterable(filter(None, map(self.by_token.get,
                                                                   wanted_tokens))))
        complete = True
        fresh = want - self.reports.keys()
        for ref in sorted(fresh):
            report = self._read_new(ref, marker, now)
            if report is None:
                complete = False
                want.discard(ref)
            else:
                self.reports[ref] = report
        for ref, old in dropped.items():
            new = self.reports.get(ref)
            self.changes.note(ref, _token(old), _token(new),
                              self.token_of.get(ref))
        for ref in fresh - dropped.keys():
            self.changes.note(ref, _token(self.reports.get(ref)))
        objects = tuple(map(self.reports.__getitem__, self._ordered(want, bool(fresh))))
        self._answer = (wanted_tokens, wanted_refs, objects, complete)
        return objects, complete

    def _patched(self, touched: set[str], wanted_tokens: set[str], wanted_refs: set[str],
                 now: datetime) -> tuple[tuple[ObjectReport, ...], bool] | None:
        """The last answer (to the same question) with the touched objects read again, when
        they are all that changes in it: each touched ref was in it and is still an object
        here, or was not in it and is not asked for. None: build the answer again."""
        assert self._answer is not None
        _, _, objects, complete = self._answer
        if self._pos is None:
            self._pos = {o.ref: i for i, o in enumerate(objects)}
        b = self.b
        for ref in touched:
            meta = b.disk.load_meta(ref) if b._exists(ref) else None
            if ref in self._pos:
                if meta is None or isinstance(meta, str) or ref in self.missing:
                    return None
            elif ref in wanted_refs or meta is not None and (
                    isinstance(meta, str) or meta.token in wanted_tokens):
                return None
        answer = list(objects)
        for ref in touched:
            old = self.reports.pop(ref, None)
            self._reindex(ref)
            at = self._pos.get(ref)
            if at is not None:
                answer[at] = self.reports[ref] = self._read(ref, now)
            self.changes.note(ref, _token(old), _token(self.reports.get(ref)),
                              self.token_of.get(ref))
        self._answer = (wanted_tokens, wanted_refs, tuple(answer), complete)
        return self._answer[2], complete

    def _ordered(self, want: set[str], new: bool) -> tuple[str, ...]:
        """``want`` as a full look orders it: objects by ref, then the missing by ref (the
        order a job's objects are decided in); kept while the set stays the same."""
        if not new and self._order is not None and self._order[0] == want:
            return self._order[1]
        found = sorted(want - self.missing)
        order = (*found, *sorted(want & self.missing))
        self._order = (frozenset(want), order)
        return order

    # ---------------------------------------------------------------- one object

    def _read_new(self, ref: str, marker: RootMarker, now: datetime) -> ObjectReport | None:
        """The report of ``ref``, not read before (None: a ref of another root)."""
        b = self.b
        if not b._exists(ref):
            made_in = ref_root(ref)
            if made_in is not None and made_in != marker.id[:8]:
                return None
            self.missing.add(ref)
            return missing(ref, b.objects_dir, marker.id, now)
        meta = b.disk.load_meta(ref)
        if isinstance(meta, str):
            self.again.add(ref)
            return unreadable(ref, None, f"meta.json unreadable: {meta}")
        self._index(ref, meta.token)
        return self._read(ref, now)

    def _read(self, ref: str, now: datetime) -> ObjectReport:
        """Read ``ref``'s files (its meta readable); watch its runner while it may run."""
        b = self.b
        meta = b.disk.load_meta(ref)
        assert not isinstance(meta, str)
        self.reads += 1
        report = b._look(ref, meta, now)
        if not report.ended:
            info = b.disk.load_runner(ref)
            if info is None:
                self.again.add(ref)
            else:
                self.watch.watch(ref, info)
        return report

    def _reindex(self, ref: str) -> None:
        """``ref`` changed: forget what was known of it, and index it again if it is there."""
        token = self.token_of.pop(ref, None)
        if token is not None:
            left = tuple(r for r in self.by_token.get(token, ()) if r != ref)
            if left:
                self.by_token[token] = left
            else:
                self.by_token.pop(token, None)
        if not self.b._exists(ref):
            self.watch.forget(ref)
            self.b.disk.forget(ref)
            return
        meta = self.b.disk.load_meta(ref)
        if not isinstance(meta, str):
            self._index(ref, meta.token)

    def _index(self, ref: str, token: str) -> None:
        self.token_of[ref] = token
        refs = self.by_token.get(token)
        if refs is None:
            self.by_token[token] = (ref,)
        elif ref not in refs:
            self.by_token[token] = tuple(sorted((*refs, ref)))


def _token(report: ObjectReport | None) -> str | None:
    return report.token if report is not None else None
