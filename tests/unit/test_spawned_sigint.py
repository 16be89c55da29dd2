"""The processes tests start take SIGINT as a user's Ctrl-C, even when the suite itself was
started with SIGINT ignored (a shell without job control does that to `pytest ... &`)."""

from __future__ import annotations

import subprocess
import sys

PROBE = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def test_a_spawned_python_gets_the_default_sigint_handler() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == "True"


def test_a_suite_started_with_sigint_ignored_still_spawns_interruptible_processes() -> None:
    # The suite's own guard (tests/conftest.py) under the condition it guards against: a
    # pytest started with SIGINT ignored runs the probe above in a child of its own.
    script = ("import signal, subprocess, sys\n"
              "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
              "sys.exit(subprocess.call([sys.executable, '-m', 'pytest', '-q', "
              "'-p', 'no:cacheprovider', '-k', 'default_sigint', __file__]))\n")
    done = subprocess.run([sys.executable, "-c", script.replace("__file__", repr(__file__))],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout, done.stdout
