"""Deferred: a tuple read from a snapshot whose items are decoded the first time they are
used (stores/snapshot.py).

A snapshot keeps a job's past (the submissions before the current one, its history, its
escalations) as the bytes they were written as. Most readers never look at them: ``ls``,
a list page and the state of a finished job read the current submission and the
outcome. Decoding the past eagerly cost as much as
decoding the events it replaces (issue 27), so it is decoded on first use: strictly, by
the same types, and checked against the count the snapshot recorded.

A Deferred is equal to, and hashes as, the tuple it stands for, so a Job read through a
snapshot equals the Job folded from its events; ``tail`` holds items decoded eagerly
(the current submission), which indexing reaches without decoding the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, overload

T = TypeVar("T")


class Deferred(Sequence[T]):
    __slots__ = ("_raw", "_count", "_decode", "_owner", "_tail", "_items")

    def __init__(self, raw: Any, count: int, decode: Callable[[Any, int, str], tuple[T, ...]],
                 owner: str, tail: tuple[T, ...] = ()) -> None:
        """``raw``: the encoded items before ``tail`` (what ``decode`` reads), ``count``
        of them; ``decode(raw, count, owner)`` returns them or raises a typed error naming
        ``owner`` (a module-level function: nothing is allocated per sequence for it)."""
        self._raw = raw
        self._count = count
        self._decode = decode
        self._owner = owner
        self._tail = tail
        self._items: tuple[T, ...] | None = None

    @property
    def decoded(self) -> bool:
        return self._items is not None

    def items(self) -> tuple[T, ...]:
        """The whole tuple (decoding the deferred part once; a race decodes it twice,
        harmlessly: both results are equal)."""
        items = self._items
        if items is None:
            # _raw is kept (it is small, compressed): a thread that raced this one
            # still decodes from it.
            items = self._decode(self._raw, self._count, self._owner) + self._tail
            self._items = items
        return items

    def __len__(self) -> int:
        return self._count + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, int) and self._items is None and self._tail:
            n = len(self)
            i = index + n if index < 0 else index
            if self._count <= i < n:
                return self._tail[i - self._count]
        return self.items()[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self.items())

    def __reversed__(self) -> Iterator[T]:
        return reversed(self.items())

    def __contains__(self, value: object) -> bool:
        return value in self.items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Deferred):
            return self.items() == other.items()
        if isinstance(other, tuple):
            return self.items() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.items())

    def __repr__(self) -> str:
        return repr(self.items())

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (self.items(),))  # a copy elsewhere is the plain tuple
