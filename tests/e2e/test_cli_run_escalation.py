"""Issue 48 item 10: `dispatch run` of a job that fails says its escalation as a line for the
person watching, never as the log's raw record (`... dispatch.escalation ERROR ...`)."""

from __future__ import annotations

from tests.e2e.conftest import Dispatch, script


def test_run_says_the_escalation_as_a_line_not_a_log_record(dispatch: Dispatch) -> None:
    spec = dispatch.spec("failing", script("import sys; sys.exit(3)"))
    done = dispatch("run", str(spec), "--poll", "0.2", timeout=180)
    assert done.returncode == 1, done.stderr
    assert "dispatch.escalation" not in done.stderr and " ERROR " not in done.stderr
    (said,) = [x for x in done.stderr.splitlines() if "escalation: " in x]
    assert "escalation: job " in said and "(failing): no rule covers non-zero-exit" in said
    # The record and the closing status keep it as they always did.
    assert "ESCALATION: no rule covers non-zero-exit" in done.stdout
