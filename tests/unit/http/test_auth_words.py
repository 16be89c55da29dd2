"""Issue 32 item 8: the Host header's name (an IPv6 literal with or without its port) and
the team tokens refused as guessable: pure functions."""

from __future__ import annotations

import secrets

import pytest

from dispatch.http.auth import guessable, host_name, is_loopback


@pytest.mark.parametrize(("header", "name", "loopback"), [
    ("[::1]", "::1", True),
    ("[::1]:8642", "::1", True),
    ("::1", "::1", True),
    ("localhost", "localhost", True),
    ("localhost:8642", "localhost", True),
    ("127.0.0.1:80", "127.0.0.1", True),
    ("[fe80::1]:80", "fe80::1", False),
    ("evil.test:8642", "evil.test", False),
    ("[::1]evil.test", "", False),
    ("[::1", "", False),
    ("[::1]:", "", False),
    ("", "", False),
])
def test_host_name_parses_ipv6_literals(header: str, name: str, loopback: bool) -> None:
    assert host_name(header) == name
    assert is_loopback(host_name(header)) is loopback


@pytest.mark.parametrize("token", ["a" * 16, "ab" * 8, "abcabcabcabcabca", "abcdefghijklmnop",
                                   "1234567890123456", "ann-0123456789abcdef", "short"])
def test_guessable_tokens_are_named(token: str) -> None:
    assert guessable(token) is not None


def test_random_tokens_pass() -> None:
    assert guessable(secrets.token_urlsafe(32)) is None
    assert guessable("correct-horse-battery-staple") is None
    assert guessable("Xk2pQ9vL4mT7wR1z") is None
