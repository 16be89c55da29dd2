"""The browser tests' fixtures (a real `dispatch serve`, Debian's chromium, a page that fails
on any script error or CSP violation) are test_dashboard.py's, shared with every file here."""

from test_dashboard import browser, page, server  # noqa: F401  (fixtures)
