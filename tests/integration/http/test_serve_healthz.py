"""`GET /healthz`: what a Kubernetes liveness or readiness probe asks of `dispatch serve`
(issue 47 item 8). It needs no token, because a kubelet has none, and so says nothing but "ok":
no job, no scope, no version, no cookie. Everything else still needs a token. Against a real
server bound to a non-loopback address with a team token file, as the Deployment runs it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx2
from serve_harness import Served, spec

TEAM = "team-Kq4Vn8Ws2Jd7Lx3B"


def test_healthz_answers_ok_without_a_token_and_says_nothing_else(
        serve: Callable[..., Served], tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"team:{TEAM}\n")
    os.chmod(tokens, 0o600)
    s = serve("--host", "0.0.0.0", "--token-file", str(tokens), token=TEAM)
    s.submit(spec("a-job", "pass"))  # something to reveal, were it to say anything

    # as a kubelet asks: the pod's address as Host, no credential
    probe = httpx2.get(s.url + "/healthz", headers={"Host": f"10.1.2.3:{s.port}"}, timeout=60)
    assert probe.status_code == 200
    assert probe.text == "ok\n"
    assert "set-cookie" not in probe.headers
    assert probe.headers["cache-control"] == "no-store"
    assert probe.headers["x-content-type-options"] == "nosniff"  # the guard's headers too

    # only GET; and the paths around it still need a token
    assert httpx2.post(s.url + "/healthz", json={}, timeout=60).status_code in (401, 405)
    for path in ("/healthz/", "/metrics", "/api/jobs", "/api/supervisors"):
        assert httpx2.get(s.url + path, timeout=60).status_code == 401, path
    assert s.client.get("/api/jobs").status_code == 200  # the team token does
