"""Text that UTF-8 cannot write: a Python str holding a lone surrogate. argv and the
environment reach Python as bytes decoded with surrogateescape, so a byte that is not UTF-8
(``dispatch status $'caf\\xe9'``) arrives as U+DCE9; no record, query or JSON can hold it, so
it is refused where it arrives, its bytes shown escaped. Pure: no I/O."""

from __future__ import annotations


def encodable(text: str) -> bool:
    """Whether UTF-8 can write ``text``."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def escaped(text: str) -> str:
    """``text`` quoted, its bytes as argv gave them, escaped: ``'caf\\xe9'``. A surrogate
    no byte maps to (from the Python API, not argv) is shown as ascii() shows it."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return ascii(text)
    return repr(raw)[1:]  # b'caf\xe9' without its b


__all__ = ["encodable", "escaped"]
