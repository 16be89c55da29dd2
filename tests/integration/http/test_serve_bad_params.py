"""Crafted query parameters against a real `dispatch serve` (issue 45 item 5): a cursor of
another shape, with mixed types or an integer no store holds, and whole numbers of 4,300
digits, are each a 400 naming the parameter; before, each was a 500 with a traceback in the
server's log."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

from serve_harness import Served, spec

HUGE = "9" * 4400


def _cursor(*doc: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(doc)).encode()).decode().rstrip("=")


def test_crafted_parameters_are_400_naming_each_and_never_a_traceback(
        serve: Callable[..., Served]) -> None:
    s = serve()
    job = s.submit(spec("p", "pass"))
    asked: list[tuple[str, dict[str, str], str]] = [
        ("/api/jobs", {"after": _cursor("created", True, 10**30, job)}, "after"),
        ("/api/jobs", {"after": _cursor("name", False, "p")}, "after"),
        ("/api/jobs", {"order": "-submissions",
                       "after": _cursor("submissions", True, "x", 1, job)}, "after"),
        ("/api/jobs", {"order": "-state", "after": _cursor("state", True, 1, "x", job)},
         "after"),
        ("/api/jobs", {"limit": HUGE}, "limit"),
        (f"/api/jobs/{job}/logs", {"tail": HUGE}, "tail"),
        (f"/api/jobs/{job}/logs", {"submission": HUGE}, "submission"),
        (f"/api/jobs/{job}/logs", {"submission": "\u0667"}, "submission"),
        ("/api/goodput", {"days": HUGE}, "days"),
    ]
    for path, params, name in asked:
        r = s.client.get(path, params=params)
        assert r.status_code == 400, (path, params, r.text[:500])
        error = r.json()["error"]
        assert error["exit_code"] == 2 and f"query parameter {name!r}" in error["message"]
        assert len(error["message"]) < 300
    # a reference and a name that are not UTF-8 (percent-encoded 0xe9): no such job
    for path in ("/api/jobs/caf%E9", "/api/jobs/caf%E9/history", "/api/jobs/caf%E9/logs"):
        r = s.client.get(path)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not-found", r.text
    assert s.client.get("/api/jobs?name=caf%E9").status_code == 200
    # the same server still answers, and its log holds no traceback
    assert s.client.get("/api/jobs", params={"limit": "5"}).status_code == 200
    assert "Traceback" not in s.output() and " 500 " not in s.output()
