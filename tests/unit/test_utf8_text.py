"""support/utf8.py: which text UTF-8 cannot write, and how its bytes are shown (issue 45)."""

from __future__ import annotations

import os

import pytest

from dispatch.support.utf8 import encodable, escaped


@pytest.mark.parametrize(("raw", "shown"), [
    (b"caf\xe9", "'caf\\xe9'"), (b"\xff\xfe", "'\\xff\\xfe'"),
    (b"caf\xc3\xa9\xe9", "'caf\\xc3\\xa9\\xe9'"), (b"a'b\xe9", "\"a'b\\xe9\"")])
def test_argv_bytes_are_shown_escaped(raw: bytes, shown: str) -> None:
    text = os.fsdecode(raw)  # as Python decodes argv (surrogateescape)
    assert not encodable(text)
    assert escaped(text) == shown and escaped(text).isascii()


def test_a_surrogate_no_byte_maps_to_is_shown_as_ascii_shows_it() -> None:
    assert not encodable("a\ud800") and escaped("a\ud800") == "'a\\ud800'"


def test_utf8_text_is_encodable() -> None:
    assert encodable("café 名前") and encodable("")
