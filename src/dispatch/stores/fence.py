"""The types of supervisor leases and fencing, which both the record store (base.py: an
append carries a ``Fence``, is refused with ``Fenced``; a store hands out its ``LeaseBook``)
and the lease books (lease.py: SQLite and PostgreSQL) name: kept here so neither of those
two modules imports the other to name them. How leases and fences work: lease.py."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from dispatch.errors import StateConflict

if TYPE_CHECKING:
    from dispatch.stores.presence import PresenceBook


@dataclass(frozen=True, slots=True)
class Fence:
    """What an append by an active supervisor carries: its lease on ``scope`` at ``epoch``."""

    scope: str
    holder: str
    epoch: int


class Fenced(StateConflict):
    """An append carried a fence that is no longer current (the lease expired, or another
    supervisor holds the scope at a later epoch) or names another scope than the job's.
    Nothing was written.

    A StateConflict, not a ConflictError: the store is healthy and the writer's *own* state
    (its lease) forbids the write, and re-reading and retrying — what every caller does with a
    ConflictError — must not happen; the writer stops acting and goes back to standby."""

    def __init__(self, job_id: str, fence: Fence, why: str) -> None:
        self.job_id = job_id
        self.fence = fence
        self.why = why
        super().__init__(
            f"job {job_id}: {fence.holder}'s lease on scope {fence.scope} at epoch "
            f"{fence.epoch} is not current ({why}); nothing written"
        )


class LeaseLost(StateConflict):
    """The supervisor's lease on a scope ended (not renewed in time, taken, or released):
    it must stop acting on that scope and go back to standby."""

    def __init__(self, scope: str, holder: str, why: str) -> None:
        self.scope = scope
        self.holder = holder
        self.why = why
        super().__init__(f"{holder} lost its lease on scope {scope}: {why}")


@dataclass(frozen=True, slots=True)
class Lease:
    """One lease row as the store's clock saw it at ``now``."""

    scope: str
    holder: str
    epoch: int
    period_s: float
    acquired_at: datetime
    expires_at: datetime
    last_tick_at: datetime | None
    released_at: datetime | None
    now: datetime

    @property
    def active(self) -> bool:
        return self.expires_at > self.now

    @property
    def state(self) -> str:
        if self.active:
            return "active"
        return "released" if self.released_at is not None else "expired"

    @property
    def fence(self) -> Fence:
        return Fence(scope=self.scope, holder=self.holder, epoch=self.epoch)


class LeaseBook(abc.ABC):
    """The leases of one record store. Every method is one short transaction."""

    @abc.abstractmethod
    def acquire(self, scope: str, holder: str, period_s: float) -> Lease | None:
        """Take ``scope`` for ``holder`` when it is free (never taken, expired or released),
        at the next epoch; None when another supervisor holds it."""

    @abc.abstractmethod
    def renew(self, fence: Fence, period_s: float) -> Lease | None:
        """Push the expiry to now + period when ``fence`` is still the current, unexpired
        lease; None when it is not (the holder must stop acting)."""

    @abc.abstractmethod
    def ticked(self, fence: Fence) -> bool:
        """Note that the holder finished a tick (``supervisors`` shows it as last tick/lag)."""

    @abc.abstractmethod
    def release(self, fence: Fence) -> bool:
        """End the lease now (a planned stop), so a standby takes over at once."""

    @abc.abstractmethod
    def all(self) -> list[Lease]:
        """Every scope's lease, ordered by scope."""

    @abc.abstractmethod
    def presence(self) -> PresenceBook:
        """Who serves each scope besides the holder: the standbys, and what each
        supervisor's scheduler refuses it (stores/presence.py)."""

    def get(self, scope: str) -> Lease | None:
        return next((lease for lease in self.all() if lease.scope == scope), None)
