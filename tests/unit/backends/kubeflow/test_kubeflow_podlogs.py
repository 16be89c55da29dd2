"""The pure part of reading pod logs: the kubelet's stamps and the cursor that skips what the
API server repeats (``sinceTime`` reaches the kubelet at whole seconds)."""

from __future__ import annotations

from dispatch.backends.kubeflow.podlogs import decode, encode, parse_stamp, since_time, take


def test_stamps_as_the_kubelet_writes_them() -> None:
    assert parse_stamp(b"2026-03-01T10:00:00Z") == (1772359200, 0)
    assert parse_stamp(b"2026-03-01T10:00:00.5Z") == (1772359200, 500_000_000)
    assert parse_stamp(b"2026-03-01T10:00:00.000000007Z") == (1772359200, 7)
    assert parse_stamp(b"2026-03-01T11:00:00.25+01:00") == (1772359200, 250_000_000)
    assert parse_stamp(b"not a stamp") is None
    assert since_time((1772359200, 999_999_999)) == "2026-03-01T10:00:00Z"


def test_the_cursor_round_trips_and_a_stranger_one_starts_over() -> None:
    place = ((1772359200, 5), 2)
    assert decode(encode(place)) == place
    assert decode(None) is None and decode("garbage") is None


def test_take_skips_what_was_taken_and_holds_an_unended_line() -> None:
    body = (b"2026-03-01T10:00:00.1Z a\n2026-03-01T10:00:00.1Z b\n"
            b"2026-03-01T10:00:00.2Z c\n2026-03-01T10:00:00.3Z par")
    first = take(body, None, whole=False)
    assert first.data == b"a\nb\nc\n" and first.held_fresh
    assert first.place == ((1772359200, 0), 3)  # the last line's second, 3 lines since
    again = take(body + b"tial\n", first.place, whole=False)
    assert again.data == b"partial\n" and not again.held_fresh
    assert take(body, first.place, whole=True).data == b"par\n"  # final: as it stands
    # two lines with one stamp, the first taken before: only the second now
    one_stamp = b"2026-03-01T10:00:00.1Z a\n2026-03-01T10:00:00.1Z b\n"
    assert take(one_stamp, ((1772359200, 100_000_000), 1), whole=False).data == b"b\n"


def test_a_line_stamped_before_one_taken_earlier_is_not_lost() -> None:
    # The runtime stamps stdout and stderr in two threads: a print can follow, in the file,
    # a stderr line stamped a little later (seen on a real node). The kubelet gives every
    # line stamped since the second asked from, in the file's order.
    first = take(b"2026-03-01T10:00:00.5Z stderr\n", None, whole=False)
    assert first.data == b"stderr\n"
    later = (b"2026-03-01T10:00:00.5Z stderr\n2026-03-01T10:00:00.4Z print\n"
             b"2026-03-01T10:00:01.2Z next\n")
    again = take(later, first.place, whole=False)
    assert again.data == b"print\nnext\n"
    assert again.place == ((1772359201, 0), 1)
    # asked again from that second, the kubelet repeats "next" only: nothing twice
    assert take(b"2026-03-01T10:00:01.2Z next\n", again.place, whole=False).data == b""
    # a page cut inside that repeated line: the same place, nothing new, nothing held fresh
    cut = take(b"2026-03-01T10:00:01.2Z ne", again.place, whole=False)
    assert cut.place == again.place and not cut.held_fresh
