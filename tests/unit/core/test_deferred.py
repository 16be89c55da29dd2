"""core/deferred.py: a snapshot's past, decoded on first use, is the tuple it stands for."""

from __future__ import annotations

import pickle
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.core.deferred import Deferred

_INTS = msgspec.json.Decoder(tuple[int, ...])


class Counting:
    """A decode function that counts its calls (a module-level function in real use)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, raw: Any, count: int, owner: str) -> tuple[int, ...]:
        self.calls.append(owner)
        items = _INTS.decode(raw)
        assert len(items) == count
        return items


def deferred(items: tuple[int, ...], tail: tuple[int, ...] = ()) -> tuple[Deferred[int], Counting]:
    decode = Counting()
    return Deferred(msgspec.json.encode(items), len(items), decode, "job-x", tail), decode


@given(st.lists(st.integers(), max_size=8), st.lists(st.integers(), max_size=2))
def test_it_is_the_tuple_it_stands_for(head: list[int], tail: list[int]) -> None:
    whole = (*head, *tail)
    d, _ = deferred(tuple(head), tuple(tail))
    assert len(d) == len(whole)
    assert d == whole and whole == d and d == deferred(tuple(head), tuple(tail))[0]
    assert d != (*whole, 1) and (*whole, 1) != d
    assert hash(d) == hash(whole)
    assert list(d) == list(whole) and list(reversed(d)) == list(reversed(whole))
    assert d[:] == whole and d[1:] == whole[1:]
    assert repr(d) == repr(whole)
    assert all(x in d for x in whole)
    for i in range(-len(whole), len(whole)):
        assert d[i] == whole[i]
    with pytest.raises(IndexError):
        d[len(whole)]
    assert pickle.loads(pickle.dumps(d)) == whole
    assert type(pickle.loads(pickle.dumps(d))) is tuple  # a copy elsewhere is plain


def test_the_tail_and_the_length_need_no_decoding_and_the_rest_decodes_once() -> None:
    d, decode = deferred((1, 2, 3), tail=(4,))
    assert len(d) == 4 and d[-1] == 4 and d[3] == 4
    assert decode.calls == [] and not d.decoded
    assert d[0] == 1 and d[1:] == (2, 3, 4) and tuple(d) == (1, 2, 3, 4)
    assert decode.calls == ["job-x"] and d.decoded  # once, naming its owner


def test_a_decoding_failure_is_the_decoders_own_error_every_time() -> None:
    class Refused(Exception):
        pass

    def refuse(raw: Any, count: int, owner: str) -> tuple[int, ...]:
        raise Refused(owner)

    d: Deferred[int] = Deferred(b"[1]", 1, refuse, "job-y", (2,))
    assert d[-1] == 2 and len(d) == 2
    for _ in range(2):  # not cached as decoded: the next use says it again
        with pytest.raises(Refused, match="job-y"):
            d[0]
    assert not d.decoded
